"""reference_kernels.semi_markov_crf: every stage's scan and gradients against the PyTorch recursion,
properties of the marginals and of the Viterbi path, input checks."""

from __future__ import annotations

import warnings

import pytest
import torch
from kernel_cases import label_ids

from reference_kernels import semi_markov_crf as crf

SPEC = crf.SPEC
HAS_GPU = torch.cuda.is_available()
DEVICE = "cuda" if HAS_GPU else "cpu"
SMALL_CASES = [c for c in SPEC.cases if c.small]
ALL_CASES = list(SPEC.cases)


def _inputs(case, dtype: torch.dtype, device: str):
    torch.manual_seed(0)
    return SPEC.make_inputs(case.dims, dtype, device), SPEC.call_kwargs(case.dims)


@pytest.mark.slow  # ~45 s of interpreter time in all
@pytest.mark.parametrize("stage", sorted(SPEC.stages))
@pytest.mark.parametrize("case", SMALL_CASES, ids=label_ids(SMALL_CASES))
@pytest.mark.parametrize("dtype", SPEC.interpreter_dtypes, ids=str)
def test_every_stage_matches_the_reference_and_its_gradients_on_the_small_cases(check, stage, case, dtype):
    check(SPEC, stage, case, dtype, DEVICE)


@pytest.mark.gpu
@pytest.mark.parametrize("stage", sorted(SPEC.stages))
@pytest.mark.parametrize("case", ALL_CASES, ids=label_ids(ALL_CASES))
@pytest.mark.parametrize("dtype", SPEC.dtypes, ids=str)
def test_every_stage_matches_the_reference_and_its_gradients_on_the_gpu(check, stage, case, dtype):
    check(SPEC, stage, case, dtype, "cuda")


@pytest.mark.slow
@pytest.mark.parametrize("stage", sorted(SPEC.stages))
def test_the_reversed_scan_yields_the_same_log_partition_function(stage):
    case = next(c for c in SMALL_CASES if c.dims["ragged"] and c.dims["semiring"] == 0)
    (em, tr, du, lengths), _ = _inputs(case, torch.float32, DEVICE)
    out, *_ = crf._scan(stage, em, tr, du, lengths, crf.SEMIRINGS["log"], directions=2, store=True)
    torch.testing.assert_close(out[1], out[0], atol=1e-5, rtol=1e-6)


def _errors_against_float64(fn, args) -> list[float]:
    """Largest absolute error of fn's output and of its three gradients, against the float64 recursion."""
    leaves = [a.detach().clone().requires_grad_(True) for a in args[:3]]
    exact = [a.detach().double().requires_grad_(True) for a in args[:3]]
    out = fn(*leaves, args[3])
    ref = crf.reference_semi_markov_crf(*exact, args[3])
    g = torch.randn(out.shape, device=out.device)
    out.backward(g)
    ref.backward(g.double())
    pairs = [(out, ref)] + [(a.grad, e.grad) for a, e in zip(leaves, exact, strict=True)]
    return [float((x.detach().double() - y.detach()).abs().max()) for x, y in pairs]


def _assert_as_accurate_as_float32_autograd(stage: int, dims: dict, device: str) -> None:
    """log Z ≈ 110 at the interpreter's size (B2 T48 K4 C4), more on the GPU: a scan that rounds at
    that magnitude every step (no offsets) is 2-5× less accurate than autograd through the float32
    PyTorch recursion in the emission gradient (stages 1-2 in log Z too); with offsets it is more than
    four times as accurate as it in every quantity. At T = 48 each stage with its offsets held at 0
    fails this check (d emissions 2.0-4.4× autograd's error) and each stage as written passes (≤ 0.23×)."""
    torch.manual_seed(0)
    args = SPEC.make_inputs({**dims, "ragged": 1, "semiring": 0}, torch.float32, device)
    torch.manual_seed(1)
    ours = _errors_against_float64(SPEC.stages[stage], args)
    torch.manual_seed(1)
    theirs = _errors_against_float64(crf.reference_semi_markov_crf, args)
    names = ["log Z", "d emissions", "d transitions", "d durations"]
    worse = [f"{n}: {a:.2e} > {b:.2e}" for n, a, b in zip(names, ours, theirs, strict=True) if a > b]
    assert not worse, f"stage {stage} is less accurate than float32 autograd: {worse}"


@pytest.mark.slow
@pytest.mark.parametrize("stage", sorted(SPEC.stages))
def test_long_sequences_are_at_least_as_accurate_as_float32_autograd(stage):
    _assert_as_accurate_as_float32_autograd(stage, {"B": 2, "T": 48, "K": 4, "C": 4}, DEVICE)


@pytest.mark.gpu
@pytest.mark.parametrize("stage", sorted(SPEC.stages))
def test_long_sequences_are_at_least_as_accurate_as_float32_autograd_on_the_gpu(stage):
    _assert_as_accurate_as_float32_autograd(stage, {"B": 4, "T": 1024, "K": 32, "C": 24}, "cuda")


def test_emission_marginals_are_label_distributions_inside_each_sequence():
    case = next(c for c in SMALL_CASES if c.dims["ragged"] and c.dims["semiring"] == 0)
    (em, tr, du, lengths), _ = _inputs(case, torch.float32, DEVICE)
    em.requires_grad_(True)
    crf.semi_markov_crf(em, tr, du, lengths).sum().backward()
    per_position = em.grad.sum(-1)  # Σ_c P(position i has label c)
    inside = torch.arange(em.shape[1], device=DEVICE)[None, :] < lengths[:, None]
    torch.testing.assert_close(per_position[inside], torch.ones_like(per_position[inside]), atol=1e-5, rtol=0)
    assert torch.all(per_position[~inside] == 0)


def test_viterbi_gradient_marks_one_segmentation_that_scores_the_viterbi_value():
    case = next(c for c in SMALL_CASES if c.dims["semiring"] == 1 and c.dims["ragged"])
    (em, tr, du, lengths), _ = _inputs(case, torch.float32, DEVICE)
    leaves = [t.clone().requires_grad_(True) for t in (em, tr, du)]
    score = crf.semi_markov_crf(*leaves, lengths, semiring="max")
    score.sum().backward()
    g_em, g_tr, g_du = (t.grad for t in leaves)
    # One label per position inside the sequence, none outside; one duration per segment, one
    # transition fewer than segments, and the marked path's total is the Viterbi score (Σ over b).
    inside = torch.arange(em.shape[1], device=DEVICE)[None, :] < lengths[:, None]
    assert torch.equal(g_em.sum(-1), inside.float())
    assert g_du.sum() == g_tr.sum() + em.shape[0]
    path_score = (g_em * em).sum() + (g_tr * tr).sum() + (g_du * du).sum()
    torch.testing.assert_close(path_score, score.sum().detach(), atol=1e-4, rtol=1e-5)


@pytest.mark.slow
def test_forward_without_gradients_skips_the_saved_state_and_agrees():
    case = SMALL_CASES[0]
    (em, tr, du, lengths), _ = _inputs(case, torch.float32, DEVICE)
    with torch.no_grad():
        plain = crf.semi_markov_crf(em, tr, du, lengths)
    em.requires_grad_(True)
    tracked = crf.semi_markov_crf(em, tr, du, lengths)
    torch.testing.assert_close(plain, tracked.detach(), atol=0, rtol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("semiring", ["log", "max"])
def test_the_graphed_reference_replays_new_inputs_and_their_gradients(semiring):
    # The benchmark's CUDA-graph peer: captured on the first call, then each call copies its inputs in; a peer
    # that replayed stale inputs, or gradients of the capture's inputs, would be timed doing the wrong work.
    case = next(c for c in SPEC.cases if c.dims["ragged"] and c.small)
    for seed in (0, 1):
        torch.manual_seed(seed)
        inputs = SPEC.make_inputs(case.dims, torch.float32, "cuda")
        leaves = [a.clone().requires_grad_(i < 3) for i, a in enumerate(inputs)]
        twins = [a.clone().requires_grad_(i < 3) for i, a in enumerate(inputs)]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            graphed = crf.graphed_reference_semi_markov_crf(*leaves, semiring=semiring)
        # The capture's side streams are by design: torch's warning about them is not passed on to the caller.
        assert not [w for w in caught if "AccumulateGrad" in str(w.message)]
        eager = crf.reference_semi_markov_crf(*twins, semiring=semiring)
        torch.testing.assert_close(graphed, eager)
        graphed.sum().backward()
        eager.sum().backward()
        for a, b in zip(leaves[:3], twins[:3], strict=True):
            torch.testing.assert_close(a.grad, b.grad)


def test_lengths_default_to_the_full_sequence():
    (em, tr, du, _), _ = _inputs(SMALL_CASES[0], torch.float32, DEVICE)
    full = torch.full((em.shape[0],), em.shape[1], device=DEVICE)
    torch.testing.assert_close(crf.semi_markov_crf(em, tr, du), crf.semi_markov_crf(em, tr, du, full))


def _brute_force(em, tr, du, semiring):
    """⊕ over every segmentation of every label sequence, enumerated (tiny T, K, C only)."""
    T, C = em.shape
    K = du.shape[0]
    scores = []

    def walk(start: int, prev: int | None, total: torch.Tensor) -> None:
        if start == T:
            scores.append(total)
            return
        for k in range(1, min(K, T - start) + 1):
            for c in range(C):
                seg = em[start : start + k, c].sum() + du[k - 1, c] + (tr[prev, c] if prev is not None else 0.0)
                walk(start + k, c, total + seg)

    walk(0, None, em.new_zeros(()))
    stacked = torch.stack(scores)
    return torch.logsumexp(stacked, 0) if semiring == "log" else stacked.max()


@pytest.mark.parametrize("semiring", ["log", "max"])
def test_the_reference_equals_brute_force_enumeration_of_segmentations(semiring):
    torch.manual_seed(0)
    # K = 4 < T = 6: some segmentations are cut off by the length limit; the second sequence is ragged.
    em, tr, du = (torch.randn(*shape, dtype=torch.float64) for shape in ((2, 6, 3), (3, 3), (4, 3)))
    lengths = torch.tensor([6, 4])
    got = crf.reference_semi_markov_crf(em, tr, du, lengths, semiring)
    for b in range(2):
        expected = _brute_force(em[b, : lengths[b]], tr, du, semiring)
        torch.testing.assert_close(got[b], expected)


# The interpreter's NumPy warns where float32 overflows and where −inf − −inf is formed (the scan's
# padding and the ruled-out label): both are the inputs' point here.
_OVERFLOWS = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
_INVALID = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


def _assert_near_float32s_maximum_gives_float64s_value_or_inf(semiring: str, device: str) -> None:
    """Inputs scaled as the audit's near_overflow run scales them (largest magnitude a quarter of float32's
    maximum). A sequence of one position scores inside float32's range, longer ones past it: the shipped
    scan must give float64's value in the one case and ±inf in the others, never NaN. The prefix-sum form
    of stages 1-2 (and of the PyTorch reference in float32) reads NaN there: S[t] − S[s] is inf − inf."""
    limit = torch.finfo(torch.float32).max / 4
    for C, K in ((5, 4), (1, 4), (4, 1)):
        torch.manual_seed(C * 10 + K)
        em, tr, du = (x / x.abs().max() * limit for x in (torch.randn(3, 16, C), torch.randn(C, C), torch.randn(K, C)))
        lengths = torch.tensor([16, 9, 1])
        exact = crf.reference_semi_markov_crf(em.double(), tr.double(), du.double(), lengths, semiring)
        beyond = exact.abs() > torch.finfo(torch.float32).max
        assert beyond.any() and not beyond.all(), exact  # both kinds of answer are asked for
        expected = torch.where(beyond, exact.sign() * float("inf"), exact)
        got = crf.semi_markov_crf(em.to(device), tr.to(device), du.to(device), lengths.to(device), semiring)
        torch.testing.assert_close(got.cpu().double(), expected, rtol=1e-5, atol=0, msg=f"C={C} K={K}")
    # u[1] = −2e38, then a segment of 4e38 (emission 3e38, duration 1e38): log Z = 2e38. An offset that
    # followed u down to −2e38 would hold alpha[2] as 2e38 − (−2e38) = inf on the way.
    em, tr, du = torch.tensor([[[-1e38], [3e38]]]), torch.tensor([[-2e38]]), torch.tensor([[1e38]])
    exact = crf.reference_semi_markov_crf(em.double(), tr.double(), du.double(), None, semiring)
    got = crf.semi_markov_crf(em.to(device), tr.to(device), du.to(device), None, semiring)
    torch.testing.assert_close(got.cpu().double(), exact, rtol=1e-6, atol=0)


def _assert_special_values_follow_the_segments_that_read_them(semiring: str, device: str) -> None:
    """A −inf emission rules its label out at that position (the sum over segmentations is finite: brute
    force in float64 agrees, where prefix differences give −inf − −inf); a NaN the scan reads makes the
    score NaN (a max that passes over NaN would hide it); a NaN in the score of a length no segment can
    have yet (K > T) is never read and changes nothing."""
    torch.manual_seed(3)
    em, tr, du = (torch.randn(*shape, dtype=torch.float64) for shape in ((2, 6, 3), (3, 3), (8, 3)))
    em[:, 2, 1] = float("-inf")
    em[:, 4, 0] = float("-inf")
    lengths = torch.tensor([6, 5])

    def run(em, du):
        return crf.semi_markov_crf(em.float().to(device), tr.float().to(device), du.float().to(device),
                                   lengths.to(device), semiring).cpu().double()  # fmt: skip

    plain = run(em, du)
    for b in range(2):
        expected = _brute_force(em[b, : lengths[b]], tr, du, semiring)
        assert torch.isfinite(expected)
        torch.testing.assert_close(plain[b], expected, atol=1e-4, rtol=1e-5)
    unread = du.clone()
    unread[6:, 1] = float("nan")  # lengths 7 and 8: longer than either sequence
    torch.testing.assert_close(run(em, unread), plain, atol=0, rtol=0)
    read = em.clone()
    read[0, 3, 2] = float("nan")
    got = run(read, du)
    assert torch.isnan(got[0]) and got[1] == plain[1]


# Near float32's maximum the scan gives float64's value or ±inf, never NaN; −inf rules a label out and a NaN
# counts only where it is read.
_SPECIAL_VALUE_CHECKS = {
    "near-max": _assert_near_float32s_maximum_gives_float64s_value_or_inf,
    "inf-nan": _assert_special_values_follow_the_segments_that_read_them,
}


@_OVERFLOWS
@_INVALID
@pytest.mark.parametrize("semiring", ["log", "max"])
@pytest.mark.parametrize("check", _SPECIAL_VALUE_CHECKS)
def test_special_values_reach_the_score_only_through_the_segments_that_read_them(check, semiring):
    _SPECIAL_VALUE_CHECKS[check](semiring, DEVICE)


@pytest.mark.gpu
@pytest.mark.parametrize("semiring", ["log", "max"])
@pytest.mark.parametrize("check", _SPECIAL_VALUE_CHECKS)
def test_special_values_reach_the_score_only_through_the_segments_that_read_them_on_the_gpu(check, semiring):
    _SPECIAL_VALUE_CHECKS[check](semiring, "cuda")


def test_scan_autotuning_keeps_at_least_four_tile_elements_per_thread():
    def warps(k_pad: int, c_pad: int) -> list[int]:
        return [c.num_warps for c in crf._prune_scan(crf._SCAN_CONFIGS, {}, K_PAD=k_pad, C_PAD=c_pad)]

    assert warps(32, 32) == [1, 2, 4, 8]  # the benchmark's tiles
    assert warps(4, 8) == [1]  # nothing to time
    assert warps(128, 128) == [1, 2, 4, 8, 16]


def _good(device: str):
    return torch.randn(2, 6, 3, device=device), torch.randn(3, 3, device=device), torch.randn(4, 3, device=device)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda em, tr, du: (em.double(), tr, du, None, "log"), "must be float32"),
        (lambda em, tr, du: (em, tr[:2], du, None, "log"), r"transitions must be \[C, C\]"),
        (lambda em, tr, du: (em, tr, du[:, :2], None, "log"), r"durations must be \[K, C\]"),
        (lambda em, tr, du: (em[0], tr, du, None, "log"), r"emissions must be \[batch, T, C\]"),
        (
            lambda em, tr, du: (em, tr, du, torch.tensor([6, 7], device=em.device), "log"),
            r"lengths must lie in \[1, T=6\]",
        ),
        (
            lambda em, tr, du: (em, tr, du, torch.tensor([0, 3], device=em.device), "log"),
            r"lengths must lie in \[1, T=6\]",
        ),
        (lambda em, tr, du: (em, tr, du, torch.tensor([6], device=em.device), "log"), r"integer tensor of shape \[2\]"),
        (lambda em, tr, du: (em, tr, du, None, "sum"), "semiring must be one of"),
    ],
    ids=[
        "fp64",
        "transitions-shape",
        "durations-shape",
        "2-d-emissions",
        "length-too-long",
        "length-zero",
        "lengths-shape",
        "semiring",
    ],
)
def test_bad_inputs_raise_value_error_that_names_the_problem(change, message):
    with pytest.raises(ValueError, match=message):
        crf.semi_markov_crf(*change(*_good(DEVICE)))


def test_spec_round_trips_dims_and_models_bytes_and_flops():
    dims = {"B": 2, "T": 7, "K": 3, "C": 5, "ragged": 1, "semiring": 1}
    args = SPEC.make_inputs(dims, torch.float32, "cpu")
    assert SPEC.dims_of(*args) == {"B": 2, "T": 7, "K": 3, "C": 5}
    assert SPEC.call_kwargs(dims) == {"semiring": "max"}
    assert SPEC.bytes_moved(dims, torch.float32) == (2 * 7 * 5 + 25 + 15 + 2) * 4 + 16
    assert SPEC.flops(dims, torch.float32) == 5 * 2 * 7 * (15 + 25)
    lengths = args[3]
    assert lengths.max() == 7 and lengths.min() >= 1


@pytest.mark.parametrize("stage", sorted(SPEC.stages))
def test_lengths_given_as_a_strided_view_are_read_element_by_element(stage):
    # Every other element of a buffer twice as wide: the kernels read lengths[b] at b, so the view must be made
    # contiguous first (it once read the gap between two lengths, and the batch element scored -inf).
    case = next(c for c in SMALL_CASES if c.dims["ragged"] and c.dims["semiring"] == 0)
    (em, tr, du, lengths), _ = _inputs(case, torch.float32, DEVICE)
    wide = torch.zeros(2 * lengths.numel(), dtype=lengths.dtype, device=DEVICE)
    wide[::2] = lengths
    fn = getattr(crf, f"semi_markov_crf_stage{stage}")
    torch.testing.assert_close(fn(em, tr, du, wide[::2]), fn(em, tr, du, lengths), atol=0, rtol=0)
