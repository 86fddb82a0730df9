# The fleet image: the hub (`python -m fleet.hub`) and the agent (`python -m member_agent`)
# from one build; deploy/ runs it. Build: docker build -t fleet:0.1.0 .
FROM python:3.12-slim
WORKDIR /src
COPY pyproject.toml README.md ./
COPY fleet fleet
COPY propagation propagation
COPY quota quota
COPY planner planner
COPY preemption preemption
COPY member-agent member-agent
RUN pip install --no-cache-dir . && rm -rf /src \
 && echo 'fleet:x:65532:65532::/tmp:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'fleet:x:65532:' >> /etc/group
WORKDIR /
# A numeric user, so the pods' runAsNonRoot can verify it; with a passwd entry, as kopf asks
# getpass.getuser() for its identity.
USER 65532:65532
ENTRYPOINT []
CMD ["python", "-m", "fleet.hub"]
