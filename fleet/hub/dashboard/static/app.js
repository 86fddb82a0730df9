// The fleet dashboard: reads the leading hub's /api views and draws them, again every
// POLL_MS while the page is open. Read-only; every element is built with the DOM (no HTML
// strings), so nothing a job or a member is named can inject markup.
"use strict";

const POLL_MS = 2000;
const COLORS = ["#0969da", "#1a7f37", "#bf3989", "#9a6700", "#8250df", "#cf222e", "#57606a",
                "#0550ae", "#116329", "#953800"];
let timer = null;
let lastText = "";
let generation = 0;

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "style") Object.assign(el.style, value);  // CSSOM: the CSP forbids style=""
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function fill(el, ...children) {
  el.replaceChildren(...children.flat(Infinity).filter(
    (c) => c !== null && c !== undefined && c !== false));
}

function svg(tag, attrs, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, String(value));
  for (const child of children) el.append(child instanceof Node ? child : String(child));
  return el;
}

function table(caption, headers, rows, attrs) {
  return h("table", attrs || {},
    caption ? h("caption", {}, caption) : null,
    h("thead", {}, h("tr", {}, headers.map(
      (name) => h("th", {scope: "col", class: name.endsWith("#") ? "num" : null},
                  name.replace(/#$/, ""))))),
    h("tbody", {}, rows));
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  const s = Math.round(seconds);
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  if (s < 172800) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

function since(stamp, now) {
  if (!stamp) return "-";
  return age((Date.parse(now || new Date().toISOString()) - Date.parse(stamp)) / 1000);
}

function bar(amounts) {
  const total = Math.max(1, amounts.total);
  return h("span", {class: "bar", role: "img",
                    "aria-label": `${amounts.used} used, ${amounts.held || 0} held, ` +
                                  `${amounts.free} free of ${amounts.total}`},
    h("span", {class: "used", style: {width: `${100 * amounts.used / total}%`}}),
    h("span", {class: "held", style: {width: `${100 * (amounts.held || 0) / total}%`}}));
}

function jobLink(uid, text) {
  return uid ? h("a", {href: `#/jobs/${encodeURIComponent(uid)}`}, text) : text;
}

function routes() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  if (path.startsWith("/jobs/")) {
    const uid = decodeURIComponent(path.slice(6));
    return {name: "jobs", api: `/api/jobs/${encodeURIComponent(uid)}`, draw: drawJob};
  }
  if (path === "/members") return {name: "members", api: "/api/members", draw: drawMembers};
  if (path === "/queues") return {name: "queues", api: "/api/queues", draw: drawQueues};
  if (path === "/jobs") {
    return {name: "jobs", api: `/api/jobs?${query || ""}`, draw: drawJobs, query: query || ""};
  }
  return {name: "overview", api: "/api/overview", draw: drawOverview};
}

// -- views -----------------------------------------------------------------------------
async function drawOverview(data, main) {
  const history = await fetchJSON("/api/history");
  const g = data.gpus;
  fill(main,
    h("h2", {}, "Fleet"),
    h("div", {class: "cards"},
      card("Members ready", `${data.membersReady} / ${data.members}`, "members-ready"),
      card("Jobs", data.jobs, "jobs"),
      card("Waiting in queues", data.waiting, "waiting"),
      card("GPUs used", `${g.used} / ${g.total}`, "gpus-used"),
      card("GPUs held", g.held, "gpus-held"),
      card("GPUs free", g.free, "gpus-free")),
    h("p", {class: "muted"},
      `Served by ${data.identity} (term ${data.term || "-"}), as of its pass at ${data.at}.`),
    h("h2", {}, "GPUs in use per queue"),
    chart(history, "used", "GPUs in use"),
    h("h2", {}, "Jobs waiting per queue"),
    chart(history, "waiting", "jobs waiting"),
    h("p", {class: "muted", id: "history-note"},
      history.since
        ? `The leading hub keeps the last ${Math.round(history.capacity * history.stepSeconds / 60)}` +
          ` minutes, a sample every ${history.stepSeconds}s; since ${history.since}.` +
          " It starts again when another replica takes over."
        : "No history yet: the leading hub samples the fleet every " +
          `${history.stepSeconds}s from when it took the lead.`));
}

function clock(stamp) {
  return new Date(stamp).toLocaleTimeString();
}

function card(label, value, id) {
  return h("div", {class: "card", id: `card-${id}`}, h("strong", {}, value), label);
}

function chart(history, field, unit) {
  const samples = history.samples || [];
  const names = [...new Set(samples.flatMap((s) => Object.keys(s[field])))].sort();
  const width = 900, height = 180, pad = 24;
  const top = Math.max(1, ...samples.flatMap((s) => Object.values(s[field])));
  const x = (i) => pad + (width - 2 * pad) * (samples.length > 1 ? i / (samples.length - 1) : 0);
  const y = (v) => height - pad - (height - 2 * pad) * v / top;
  const plot = svg("svg", {class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img",
                           "aria-label": `${unit} per queue over time, peak ${top}`},
    svg("line", {x1: pad, y1: height - pad, x2: width - pad, y2: height - pad,
                 stroke: "#d0d7de"}),
    svg("text", {x: 2, y: pad, "font-size": 11, fill: "#57606a"}, top),
    svg("text", {x: 2, y: height - pad, "font-size": 11, fill: "#57606a"}, 0),
    svg("text", {x: pad, y: height - 6, "font-size": 11, fill: "#57606a"},
        samples.length ? clock(samples[0].at) : ""),
    svg("text", {x: width - pad, y: height - 6, "font-size": 11, fill: "#57606a",
                 "text-anchor": "end"}, samples.length ? clock(samples[samples.length - 1].at) : ""));
  names.forEach((name, n) => {
    const points = samples.map((s, i) => `${x(i)},${y(s[field][name] || 0)}`).join(" ");
    plot.append(svg("polyline", {points, fill: "none", stroke: COLORS[n % COLORS.length],
                                 "stroke-width": 2}, svg("title", {}, name)));
  });
  const last = samples.length ? samples[samples.length - 1][field] : {};
  const legend = h("div", {class: "legend"}, names.map((name, n) =>
    h("span", {}, h("i", {style: {background: COLORS[n % COLORS.length]}}),
      `${name}: ${last[name] || 0}`)));
  return h("figure", {}, plot, legend);
}

function drawMembers(data, main) {
  const rows = data.members.map((m) => {
    const state = !m.ready ? ["NotReady", "bad"] : m.stale ? ["Stale", "warn"] : ["Ready", "ok"];
    return h("tr", {"data-member": m.name, "data-state": state[0],
                    class: m.stale ? "stale" : null},
      h("th", {scope: "row"}, m.name),
      h("td", {}, h("span", {class: `badge ${state[1]}`}, state[0]),
        m.reason ? h("div", {class: "muted"}, m.reason) : null),
      h("td", {class: "num"}, age(m.heartbeatAgeSeconds)),
      h("td", {}, bar(m.gpus), `${m.gpus.used} used · ${m.gpus.held} held · ${m.gpus.free} free` +
        ` / ${m.gpus.total}`),
      h("td", {class: "num"}, m.works),
      h("td", {}, Object.entries(m.cells).map(([q, n]) => `${q}: ${n}`).join(", ") || "-"));
  });
  fill(main,
    h("h2", {}, "Members"),
    table(`${data.members.length} members, as the hub knows them`,
          ["Member", "State", "Heartbeat#", "GPUs", "Shares#", "Cells (nodes per queue)"],
          rows, {id: "members"}),
    data.members.map((m) => h("details", {"aria-label": `${m.name} capacity`},
      h("summary", {}, `${m.name}: capacity by node shape, conditions`),
      table(null, ["Shape", "Nodes#", "GPUs free#", "GPUs#", "CPU free#", "Memory free#"],
        m.shapes.map((s) => h("tr", {},
          h("th", {scope: "row"}, s.name), h("td", {class: "num"}, s.nodes),
          h("td", {class: "num"}, s.gpus.free), h("td", {class: "num"}, s.gpus.total),
          h("td", {class: "num"}, `${(s.cpu.free / 1000).toFixed(0)} / ${(s.cpu.total / 1000).toFixed(0)}`),
          h("td", {class: "num"}, `${gib(s.memory.free)} / ${gib(s.memory.total)} GiB`)))),
      m.conditions.length ? table(null, ["Condition", "Status", "Reason", "Message"],
        m.conditions.map((c) => h("tr", {}, h("td", {}, c.type), h("td", {}, c.status),
                                   h("td", {}, c.reason), h("td", {}, c.message)))) : null)));
}

function gib(bytes) { return (bytes / 2 ** 30).toFixed(0); }

function drawQueues(data, main) {
  if (!data.tree) {
    fill(main, h("h2", {}, "Queues"),
      h("p", {}, "No ElasticQuotaTree: jobs are placed as they come, without quota queues."));
    return;
  }
  const fmt = (amounts) => Object.entries(amounts).map(([r, v]) => `${r} ${v}`).join(", ") || "-";
  const rows = data.queues.map((q) => h("tr", {"data-queue": q.name},
    h("th", {scope: "row", style: {paddingLeft: `${0.6 + 1.4 * q.depth}rem`}}, q.name,
      q.leaf ? "" : h("span", {class: "muted"}, " (parent)")),
    h("td", {}, q.namespaces.join(", ") || "-"),
    h("td", {class: "num"}, q.gpus.min), h("td", {class: "num"}, q.gpus.max),
    h("td", {class: "num"}, q.gpus.used),
    h("td", {class: "num"}, q.gpus.borrowed ? h("span", {class: "warn"}, q.gpus.borrowed) : 0),
    h("td", {}, fmt(q.used), h("div", {class: "muted"}, `max ${fmt(q.max)}`)),
    h("td", {class: "num"}, q.waitingCount)));
  const leaves = data.queues.filter((q) => q.leaf && q.waiting.length);
  fill(main,
    h("h2", {}, `Queues of ${data.tree}`),
    table(null, ["Queue", "Namespaces", "GPU min#", "GPU max#", "GPUs used#", "Borrowed#",
                 "Used (all)", "Waiting#"], rows, {class: "tree", id: "queues"}),
    leaves.length ? null : h("p", {class: "muted"}, "No job waits."),
    leaves.map((q) => h("section", {"aria-label": `waiting in ${q.name}`},
      h("h3", {}, `Waiting in ${q.name} (${q.waitingCount})`),
      table(q.waitingCount > q.waiting.length ? `the first ${q.waiting.length}` : null,
        ["Position#", "Job", "Reason", "Message", "Waiting for#"],
        q.waiting.map((w) => h("tr", {"data-job": w.job, "data-position": w.position},
          h("td", {class: "num"}, w.position),
          h("td", {}, jobLink(w.uid, w.job), h("div", {class: "muted"}, w.kind)),
          h("td", {}, w.reason), h("td", {}, w.message),
          h("td", {class: "num"}, age(w.waitedSeconds)))),
        {"data-waiting-in": q.name}))));
}

function drawJobs(data, main, route) {
  const params = new URLSearchParams(route.query);
  let form = main.querySelector("form.filters");
  if (!form || main.dataset.route !== "jobs") {
    const field = (label, name, input) => h("label", {}, label, input);
    form = h("form", {class: "filters", role: "search"},
      field("Name or namespace", "text",
            h("input", {name: "text", type: "search", value: params.get("text") || ""})),
      field("State", "state", h("select", {name: "state"},
        ["", ...new Set([...Object.keys(data.states), params.get("state") || ""])].map(
          (s) => h("option", {value: s, selected: (params.get("state") || "") === s},
                   s ? `${s} (${data.states[s] || 0})` : "any")))),
      field("Queue", "queue", h("input", {name: "queue", value: params.get("queue") || ""})),
      h("button", {type: "submit"}, "Filter"));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const query = new URLSearchParams(new FormData(form));
      for (const [k, v] of [...query.entries()]) if (!v) query.delete(k);
      location.hash = `#/jobs?${query}`;
    });
    fill(main, h("h2", {}, "Jobs"), form, h("div", {id: "job-list"}));
    main.dataset.route = "jobs";
  }
  const rows = data.jobs.map((j) => h("tr", {"data-job": `${j.namespace}/${j.name}`},
    h("td", {}, jobLink(j.uid, `${j.namespace}/${j.name}`)), h("td", {}, j.kind),
    h("td", {}, j.state), h("td", {}, j.queue || "-"),
    h("td", {class: "num"}, j.position ?? "-"), h("td", {}, j.reason || "-"),
    h("td", {}, j.clusters.join(", ") || "-"), h("td", {}, since(j.created))));
  main.querySelector("#job-list").replaceChildren(table(
    data.total > data.shown ? `${data.shown} of ${data.total}, newest first` : `${data.total} jobs`,
    ["Job", "Kind", "State", "Queue", "Position#", "Waits for", "Members", "Age"], rows,
    {id: "jobs"}));
}

function drawJob(data, main) {
  const j = data.job;
  const pods = data.shares.flatMap((s) => s.pods.map((p) => h("tr", {"data-pod": p.name},
    h("td", {}, p.name), h("td", {}, p.role || "-"), h("td", {}, s.cluster),
    h("td", {}, p.node || "-"), h("td", {}, p.phase), h("td", {}, p.ready ? "yes" : "no"),
    h("td", {class: "num"}, p.restarts), h("td", {}, h("code", {}, p.logs)))));
  main.dataset.route = "job";
  fill(main,
    h("h2", {}, `${j.kind} ${j.namespace}/${j.name}`),
    h("p", {id: "job-summary"}, h("strong", {}, j.state), " — ", data.message),
    h("h3", {}, "Gang across members"),
    data.shares.length ? table(null, ["Member", "Replicas", "State", "Applied", "Work"],
      data.shares.map((s) => h("tr", {"data-cluster": s.cluster},
        h("th", {scope: "row"}, s.cluster),
        h("td", {}, Object.entries(s.replicas).map(([r, n]) => `${r} ${n}`).join(", ")),
        h("td", {}, s.state), h("td", {}, s.applied ? "yes" : "not yet"),
        h("td", {}, s.work))), {id: "shares"})
      : h("p", {class: "muted", id: "shares"}, "Not placed."),
    h("h3", {}, "Pods"),
    pods.length ? table("read from the members that run them; the command prints a pod's log",
      ["Pod", "Role", "Member", "Node", "Phase", "Ready", "Restarts#", "Log"], pods)
      : h("p", {class: "muted"}, "No pods reported."),
    h("h3", {}, "Timeline"),
    h("ol", {class: "timeline", id: "timeline"}, data.timeline.map((m) => h("li", {},
      h("time", {datetime: m.time}, m.time.replace("T", " ").replace("Z", "")),
      h("strong", {}, m.what), m.detail ? ` ${m.detail}` : "",
      h("span", {class: "muted"}, ` (${m.source})`)))),
    h("h3", {}, "Conditions"),
    table(null, ["Type", "Status", "Reason", "Message"], data.conditions.map((c) =>
      h("tr", {}, h("td", {}, c.type), h("td", {}, c.status), h("td", {}, c.reason),
        h("td", {}, c.message)))));
}

// -- fetching and polling ---------------------------------------------------------------
async function fetchJSON(url) {
  const answer = await fetch(url, {cache: "no-store"});
  const text = await answer.text();
  let data;
  try { data = JSON.parse(text); } catch { data = {error: text}; }
  if (!answer.ok) {
    const error = new Error(data.error || `${answer.status} ${answer.statusText}`);
    error.leader = data.leader;
    throw error;
  }
  return data;
}

async function refresh(force) {
  const route = routes();
  const mine = ++generation;
  const status = document.getElementById("status");
  for (const link of document.querySelectorAll("nav a")) {
    if (link.dataset.view === route.name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  try {
    const answer = await fetch(route.api, {cache: "no-store"});
    const text = await answer.text();
    if (mine !== generation) return;
    let data;
    try { data = JSON.parse(text); } catch { data = {error: text}; }
    if (!answer.ok) {
      throw Object.assign(new Error(data.error || `${answer.status}`), {leader: data.leader});
    }
    const main = document.getElementById("main");
    if (force || text !== lastText || route.name === "overview") {
      if (force && route.name !== "jobs") delete main.dataset.route;
      await route.draw(data, main, route);
      lastText = text;
    }
    status.className = "";
    status.textContent = `Live · updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    if (mine !== generation) return;
    status.className = "error";
    status.textContent = `Not current: ${error.message}` +
      (error.leader ? ` (the leader is ${error.leader})` : "");
  }
}

function start() {
  clearInterval(timer);
  lastText = "";
  const main = document.getElementById("main");
  delete main.dataset.route;
  refresh(true);
  timer = setInterval(() => refresh(false), POLL_MS);
}

window.addEventListener("hashchange", start);
document.addEventListener("DOMContentLoaded", start);
