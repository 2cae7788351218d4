"""Space files: parsing, errors that name the path, and the value mappings."""

import os

import pytest

from tailguard_tune import experiment, space

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


@pytest.fixture
def doc():
    return experiment.load(os.path.join(FIXTURES, "tiny.yaml"))


def parse(text, doc):
    return space.parse(text, doc, source="s.yaml")


def test_a_space_of_each_type(doc):
    sp = parse(
        """
parameters:
  - { path: services.db.workers, type: discrete, range: [1, 9], step: 2 }
  - { path: services.db.service_time.mean, type: continuous, range: [1, 4], unit: ms, log: true }
  - { path: services.frontend.calls.0.policy, type: categorical, choices: [{balancer: {kind: random}}, {}] }
  - { path: services.cache.admission, type: categorical, choices: [{kind: none}, {kind: fixed, capacity: 4}],
      default: {kind: none} }
""",
        doc,
    )
    workers, mean, policy, admission = sp.params
    assert workers.from_unit(0.0) == 1 and workers.from_unit(0.5) == 5 and workers.from_unit(1.0) == 9
    assert workers.from_unit(0.3) == 3
    assert mean.from_unit(0.5) == pytest.approx(2.0)
    assert mean.to_yaml(2.0) == "2ms"
    assert mean.from_yaml("2ms") == 2.0 and mean.from_yaml("2s") is None and mean.from_yaml("9ms") is None
    assert policy.labels() == ("{balancer: {kind: random}}", "{}")
    assert policy.to_yaml("{}") == {}
    assert policy.from_unit(0.49) == "{balancer: {kind: random}}" and policy.from_unit(1.0) == "{}"
    assert sp.to_unit({p.path: p.from_unit(0.75) for p in sp.params})[2] == 0.75
    # The file's values: db.workers 1 and the mean 2ms are inside; the policy is absent and gives no default.
    assert sp.defaults(doc) is None
    assert sp.subset([admission.path, workers.path]).defaults(doc) == {
        workers.path: 1,
        admission.path: "{kind: none}",
    }


def test_written_values_are_rounded_to_six_digits_and_kept_in_range(doc):
    [p] = parse(
        "parameters: [{path: services.frontend.calls.1.policy.hedge.max_extra, type: continuous, range: [0.01, 0.5]}]",
        doc,
    ).params
    assert p.to_yaml(0.49999999999999994) == 0.5
    assert p.to_yaml(0.123456789) == 0.123457


@pytest.mark.parametrize(
    "entry, message",
    [
        (
            "{ path: services.dbb.workers, type: discrete, range: [1, 4] }",
            (
                "s.yaml: parameters.0 (services.dbb.workers): no such path 'services.dbb.workers': "
                "services has no key 'dbb'; it has: frontend, cache, db"
            ),
        ),
        (
            "{ path: services.db.calls.0.count, type: discrete, range: [1, 4] }",
            "parameters.0 (services.db.calls.0.count): no such path 'services.db.calls.0.count': "
            "services.db has no key 'calls'",
        ),
        (
            "{ path: services.frontend.calls.2.count, type: discrete, range: [1, 4] }",
            "services.frontend.calls is a list of 2; expected an index from 0 to 1, got '2'",
        ),
        (
            "{ path: workload.target.name, type: discrete, range: [1, 4] }",
            "workload.target is a string, not a mapping or a list",
        ),
        (
            "{ path: services.db.workers, type: integer, range: [1, 4] }",
            "type: expected one of continuous, discrete, categorical",
        ),
        ("{ path: services.db.workers, type: discrete, range: [4, 1] }", "range: expected low < high"),
        ("{ path: services.db.workers, type: discrete, range: [1.5, 4] }", "integer bounds"),
        ("{ path: services.db.workers, type: discrete }", "range: expected [low, high]"),
        (
            "{ path: services.db.workers, type: continuous, range: [0, 4], log: true }",
            "a log scale needs a range above 0",
        ),
        ("{ path: services.db.workers, type: categorical, choices: [1] }", "at least two values"),
        ("{ path: services.db.workers, type: discrete, range: [1, 4], stepp: 2 }", "unknown field 'stepp'"),
        ("{ path: variants.0, type: discrete, range: [1, 4] }", "not whole lists of runs"),
        ("{ path: 'services..workers', type: discrete, range: [1, 4] }", "has an empty part"),
    ],
)
def test_errors_name_the_parameter_and_what_is_wrong(doc, entry, message):
    with pytest.raises(space.SpaceError) as e:
        parse(f"parameters:\n  - {entry}\n", doc)
    assert message in str(e.value)


def test_whole_file_errors(doc, tmp_path):
    with pytest.raises(space.SpaceError, match="non-empty list `parameters`"):
        parse("parameters: []", doc)
    with pytest.raises(space.SpaceError, match="the path appears twice"):
        parse(
            "parameters:\n- {path: services.db.workers, type: discrete, range: [1, 2]}\n"
            "- {path: services.db.workers, type: discrete, range: [1, 3]}\n",
            doc,
        )
    with pytest.raises(space.SpaceError, match="not valid YAML"):
        parse("parameters: [", doc)
    with pytest.raises(space.SpaceError, match="cannot read the space file"):
        space.load(str(tmp_path / "none.yaml"), doc)


def test_the_examples_space_checks_against_its_experiment():
    root = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "tune")
    d = experiment.load(os.path.join(root, "sim-app.yaml"))
    sp = space.load(os.path.join(root, "sim-space.yaml"), d)
    assert len(sp) == 32
    defaults = sp.defaults(d)
    assert defaults is not None and defaults["services.post-storage-mongo.workers"] == 2
