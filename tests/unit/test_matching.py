"""Which policy governs a job: priority, then specificity, then namespaced over cluster-wide."""

from __future__ import annotations

from propagation.matching import JobIdentity, PolicyRef, Selector, governing_policy
from propagation.views import Affinity

JOB = JobIdentity("kubeflow.org/v1", "PyTorchJob", "default", "train", (("team", "a"),))


def kind_only(ns: str, name: str, priority: int = 0) -> PolicyRef:
    return PolicyRef(ns, name, (Selector("kubeflow.org/v1", "PyTorchJob"),), priority)


def test_kind_selector_matches_and_other_kinds_do_not() -> None:
    other = PolicyRef("default", "tf", (Selector("kubeflow.org/v1", "TFJob"),))
    assert governing_policy(JOB, [other]) is None
    assert governing_policy(JOB, [other, kind_only("default", "p")]) == kind_only("default", "p")


def test_policies_of_other_namespaces_do_not_apply() -> None:
    assert governing_policy(JOB, [kind_only("team-b", "p")]) is None


def test_name_beats_labels_beats_kind() -> None:
    by_name = PolicyRef("default", "z-name", (Selector("kubeflow.org/v1", "PyTorchJob",
                                                        name="train"),))
    by_label = PolicyRef("default", "y-label", (Selector(
        "kubeflow.org/v1", "PyTorchJob", label_selector=Affinity(match_labels=(("team", "a"),))),))
    assert governing_policy(JOB, [kind_only("default", "a"), by_label]) == by_label
    assert governing_policy(JOB, [kind_only("default", "a"), by_label, by_name]) == by_name


def test_explicit_priority_wins_and_namespaced_beats_cluster_wide() -> None:
    cluster = kind_only("", "cluster-wide")
    assert governing_policy(JOB, [cluster, kind_only("default", "local")]).name == "local"
    assert governing_policy(JOB, [cluster]) == cluster
    assert governing_policy(JOB, [kind_only("", "urgent", priority=5),
                                  kind_only("default", "local")]).name == "urgent"
