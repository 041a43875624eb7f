"""Trace parsing, synthetic traces, token-exact texts and the /metrics parser (pure)."""

from __future__ import annotations

import pytest

from modalscale.runtime.client import parse_metrics
from modalscale.runtime.workload import WORDS, TraceRow, parse_trace, synthetic_trace, text_of_tokens

HEADER = "arrival_s,image_count,image_width,image_height,text_tokens\n"


def test_trace_rows_are_parsed_and_sorted() -> None:
    rows = parse_trace((HEADER + "0.5,0,0,0,12\n0.1,2,640,480,0\n0.3,1,224,224,8\n").splitlines())
    assert [r.arrival_s for r in rows] == [0.1, 0.3, 0.5]
    assert rows[0] == TraceRow(0.1, 2, 640, 480, 0)
    assert [r.modality for r in rows] == ["image", "image_text", "text"]


@pytest.mark.parametrize(("body", "message"), [
    ("arrival_s,image_count\n0,1\n", "missing columns"),
    (HEADER + "x,1,2,2,0\n", "trace line 2"),
    (HEADER + "0,1,0,0,5\n", "image_width and image_height"),
    (HEADER + "0,0,0,0,0\n", "needs images or text"),
    (HEADER + "-1,0,0,0,3\n", "negative"),
], ids=["columns", "not-a-number", "no-size", "empty", "negative"])
def test_bad_traces_name_the_problem(body: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_trace(body.splitlines())


def test_synthetic_trace_is_seeded_and_in_range() -> None:
    a = synthetic_trace(rate_rps=20, duration_s=5, seed=3)
    assert a == synthetic_trace(rate_rps=20, duration_s=5, seed=3)
    assert a != synthetic_trace(rate_rps=20, duration_s=5, seed=4)
    assert all(0 < r.arrival_s < 5 for r in a)
    assert all(r.image_count or r.text_tokens for r in a)
    assert 40 < len(a) < 170  # Poisson(100): far outside this band is a bug, not bad luck


def test_text_of_tokens_has_that_many_words() -> None:
    text = text_of_tokens(17, seed=1)
    assert len(text.split()) == 17 and all(w in WORDS for w in text.split())
    assert text_of_tokens(0) == ""


def test_parse_metrics_keeps_wire_names_and_sorts_labels() -> None:
    text = ("# HELP nv_inference_request_success Number of successful inference requests\n"
            "# TYPE nv_inference_request_success counter\n"
            'nv_inference_request_success{version="1",model="multimodal"} 4\n'
            'modalscale_request_image_pixels_bucket{le="+Inf"} 2\n'
            "modalscale_request_image_pixels_sum 1.5e+04\n")
    assert parse_metrics(text) == {
        'nv_inference_request_success{model="multimodal",version="1"}': 4.0,
        'modalscale_request_image_pixels_bucket{le="+Inf"}': 2.0,
        "modalscale_request_image_pixels_sum": 15000.0,
    }


def test_fidelity_texts_are_real_varied_and_disjoint_from_the_int8_calibration_texts() -> None:
    from modalscale.runtime.model.calibration import CALIBRATION_TEXTS
    from modalscale.runtime.workload import docstring_paragraphs, fidelity_texts

    corpus = " ".join(docstring_paragraphs())
    assert not [t for t in CALIBRATION_TEXTS if t in corpus]  # no calibration text inside the fidelity corpus
    texts = fidelity_texts(200, exclude=CALIBRATION_TEXTS)
    assert len(texts) == 200 and texts == fidelity_texts(200, exclude=CALIBRATION_TEXTS)  # deterministic
    lengths = sorted(len(t.split()) for t in texts)
    assert lengths[0] <= 5 and lengths[-1] >= 200  # short queries up to texts past the 254-token window
    assert len(CALIBRATION_TEXTS) >= 64 and not set(texts) & set(CALIBRATION_TEXTS)


def test_the_photographs_are_found_without_importing_the_packages_that_ship_them() -> None:
    """The load generator's photographs are files of scikit-image and scikit-learn: locating them imported both
    packages (sklearn.datasets brings SciPy and joblib), about 4 s of CPU on a shared 2-core machine before the
    first request of ``modalscale load`` or the first photograph of a test. Checked in a fresh interpreter, since
    this test process may have imported them already."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; from modalscale.runtime.workload import photo_bytes, photo_names; "
            "sizes = [len(photo_bytes(n)) for n in photo_names()]; "
            "print(len(sizes), min(sizes) > 10000, sorted({m.split('.')[0] for m in sys.modules} "
            "& {'skimage', 'sklearn', 'scipy'}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                          cwd=Path(__file__).resolve().parents[3])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().split(maxsplit=2) == ["6", "True", "[]"], proc.stdout
