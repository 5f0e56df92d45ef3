"""The differential search: zero disagreements between the model and `kvclaims.spec.lower` on
every target of the bound."""

from kvclaims.solver.differential import search


def test_differential_search_finds_no_disagreement() -> None:
    report = search()
    assert report.targets > 300 and report.distinct_descriptors > 300
    assert [d.summary() for d in report.disagreements] == []
