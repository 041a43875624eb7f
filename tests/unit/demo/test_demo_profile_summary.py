"""The demo's one line about the fitted service-time model comes from ``modalscale profile --json``'s report.

It joined the last 3 lines of profile's rich table instead: a baseline's row and a border
("│ linear_in_tokens │ 395.9 │ 694.4 │ └────┘ model MAPE by modality: ..."), which read as the model's figures.
"""

from __future__ import annotations

from modalscale.demo.run import profile_summary

REPORT = {"rows": 96, "kind": "gbr", "splits": [
    {"name": "random", "n_train": 72, "noise_floor_mape": 0.05,
     "results": {"model": {"mae_ms": 120.0, "mape_ratio": 0.21, "n": 24},
                 "mean": {"mae_ms": 900.0, "mape_ratio": 1.80, "n": 24},
                 "linear_in_tokens": {"mae_ms": 395.9, "mape_ratio": 6.944, "n": 24}},
     "model_mape_by_modality": {"image": 0.12}},
    {"name": "unseen shapes", "n_train": 70,
     "results": {"model": {"mae_ms": 150.0, "mape_ratio": 0.343, "n": 26},
                 "linear_in_tokens": {"mae_ms": 395.9, "mape_ratio": 6.944, "n": 26},
                 "mean": {"mae_ms": 800.0, "mape_ratio": 1.5, "n": 26}},
     "model_mape_by_modality": {"image": 0.343, "image_text": 0.35, "text": 0.658}}]}


def test_the_line_names_the_models_held_out_error_and_the_best_baseline_not_a_table_fragment() -> None:
    line = profile_summary(REPORT)
    assert line == ("held-out unseen shapes (26 requests): model MAPE 34.3 %, best baseline mean 150.0 %; "
                    "by modality: image 34.3 %, image_text 35.0 %, text 65.8 %")
    assert "│" not in line and "└" not in line


def test_a_report_without_splits_says_so() -> None:
    assert profile_summary({"rows": 3, "splits": []}) == "3 rows, no held-out split evaluated"
