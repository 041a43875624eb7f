"""Trace readers (modalscale CSV, Azure LLM trace) and the generator."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from modalscale.autoscaler.traces import (
    ImageMix,
    Trace,
    TraceSpec,
    generate_trace,
    modality_shift_trace,
    read_azure_llm_trace,
    read_trace_csv,
    write_trace_csv,
)


def test_reads_modalscale_csv_sorted_by_arrival(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(
        "arrival_s,image_count,image_width,image_height,text_tokens\n"
        "1.5,2,640,480,30\n"
        "0.25,0,0,0,120\n"
        "3.0,1,100,50,0\n"
    )
    trace = read_trace_csv(path)
    np.testing.assert_array_equal(trace.arrival_s, [0.25, 1.5, 3.0])
    np.testing.assert_array_equal(trace.image_pixels, [0, 2 * 640 * 480, 5000])
    np.testing.assert_array_equal(trace.modality, [0, 2, 1])  # text, image_text, image
    assert trace.service_ms is None
    assert trace.duration_s == 3.0


def test_csv_round_trip_keeps_service_ms(tmp_path: Path) -> None:
    trace = generate_trace(TraceSpec(duration_s=30, mean_rate_rps=5, random_state=2))
    trace = Trace(trace.arrival_s, trace.image_count, trace.image_width, trace.image_height, trace.text_tokens,
                  np.linspace(10, 20, len(trace)))
    write_trace_csv(trace, tmp_path / "t.csv")
    back = read_trace_csv(tmp_path / "t.csv")
    np.testing.assert_allclose(back.arrival_s, trace.arrival_s, atol=1e-6)
    np.testing.assert_array_equal(back.image_pixels, trace.image_pixels)
    np.testing.assert_allclose(back.service_ms, trace.service_ms, atol=1e-3)


def test_csv_errors_name_column_and_line(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,image_count,text_tokens\n0,0,1\n")
    with pytest.raises(ValueError, match="image_width"):
        read_trace_csv(path)
    path.write_text("arrival_s,image_count,image_width,image_height,text_tokens\n0,0,0,0,x\n")
    with pytest.raises(ValueError, match="line 2: column text_tokens"):
        read_trace_csv(path)
    path.write_text("arrival_s,image_count,image_width,image_height,text_tokens\n0,2,0,0,5\n")
    with pytest.raises(ValueError, match="image_width"):
        read_trace_csv(path)


_HEADER = "arrival_s,image_count,image_width,image_height,text_tokens,service_ms\n"


@pytest.mark.parametrize(("rows", "says"), [
    ("0,0,0,0,5,10\nnan,0,0,0,5,10\n", r"line 3: column arrival_s='nan' is not a finite number"),
    ("inf,0,0,0,5,10\n", r"line 2: column arrival_s='inf' is not a finite number"),
    ("0,0,0,0,5,-inf\n", r"line 2: column service_ms='-inf' is not a finite number"),
    ("0,0,0,0,1e400,10\n", r"line 2: column text_tokens='1e400' is not a finite number"),
    ("0,0,0,0,5,10\n1,0,0,0,-3,10\n", r"line 3: column text_tokens='-3' must be >= 0"),
    ("-1,0,0,0,5,10\n", r"line 2: column arrival_s='-1' must be >= 0"),
    ("1765000000,0,0,0,5,10\n1765000001,0,0,0,5,10\n",
     r"line 2: column arrival_s='1765000000' is more than 7 days \(604800 s\) after the trace start: arrival_s is "
     r"seconds since the trace start; subtract the first timestamp"),
    ("0,0,0,0,5,10\n1,2,0,0,5,10\n", r"line 3: column image_count='2' needs image_width and image_height > 0"),
    ("0,0,640,480,5,10\n", r"line 2: column image_width='640' needs image_count > 0"),
], ids=["nan", "inf", "service-inf", "overflow", "negative", "negative-arrival", "unix-time", "images", "no-images"])
def test_csv_refuses_non_finite_negative_and_absolute_values_naming_line_and_column(
        tmp_path: Path, rows: str, says: str) -> None:
    # Before: nan -> a ValueError traceback from numpy, inf -> OverflowError, 1765000000 -> minutes of CPU simulating
    # from 0, -3 -> "trace values must be >= 0" without the line.
    path = tmp_path / "t.csv"
    path.write_text(_HEADER + rows)
    with pytest.raises(ValueError, match=says):
        read_trace_csv(path)


def test_a_trace_of_exactly_seven_days_is_read(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(_HEADER + "0,0,0,0,5,10\n604800,0,0,0,5,10\n")
    assert read_trace_csv(path).duration_s == 604800


AZURE = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.6805900,374,44\n"
    "2023-11-16 18:15:50.9951690,396,109\n"
    "2023-11-16 18:15:51.2224670,879,55\n"
)


def test_reads_azure_trace_relative_times_and_context_tokens(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text(AZURE)
    trace = read_azure_llm_trace(path, ImageMix(image_fraction=0.0))
    np.testing.assert_allclose(trace.arrival_s, [0.0, 4.314579, 4.541877], atol=1e-6)
    np.testing.assert_array_equal(trace.text_tokens, [374, 396, 879])
    assert (trace.image_count == 0).all()
    with_images = read_azure_llm_trace(path, ImageMix(image_fraction=1.0))
    assert (with_images.image_count >= 1).all() and (with_images.image_pixels > 0).all()


def test_azure_reader_names_missing_columns(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,3\n")
    with pytest.raises(ValueError, match="GeneratedTokens"):
        read_azure_llm_trace(path)


def test_image_mix_follows_its_fraction_and_pixel_scale() -> None:
    rng = np.random.default_rng(0)
    count, width, height, _ = ImageMix(image_fraction=0.3).sample(20000, rng)
    assert (count > 0).mean() == pytest.approx(0.3, abs=0.02)
    assert (count[count > 0] == 1).mean() == pytest.approx(0.803, abs=0.02)  # ServeGen: 80.3 % one image
    base = (width * height)[count > 0].mean()
    count4, width4, height4, _ = ImageMix(image_fraction=0.3, pixel_scale=4.0).sample(20000, np.random.default_rng(0))
    assert (width4 * height4)[count4 > 0].mean() / base == pytest.approx(4.0, rel=0.02)


def test_generated_trace_has_the_requested_mean_rate_and_swing() -> None:
    trace = generate_trace(TraceSpec(duration_s=1200, mean_rate_rps=20, rate_swing_ratio=0.45, random_state=4))
    assert len(trace) / 1200 == pytest.approx(20, rel=0.03)
    first_half = (trace.arrival_s < 600).sum()
    assert first_half / (len(trace) - first_half) == pytest.approx(
        (1 + 0.45 * 2 / np.pi) / (1 - 0.45 * 2 / np.pi), rel=0.05)


def test_generated_trace_is_reproducible() -> None:
    a, b = (generate_trace(TraceSpec(duration_s=60, random_state=9)),
            generate_trace(TraceSpec(duration_s=60, random_state=9)))
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    np.testing.assert_array_equal(a.image_pixels, b.image_pixels)


def test_bursty_arrivals_have_the_requested_cv() -> None:
    trace = generate_trace(TraceSpec(duration_s=2000, rate_swing_ratio=0.0, arrival_cv=2.0, random_state=1))
    gaps = np.diff(trace.arrival_s)
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.1)


def test_modality_shift_trace_shifts_mix_and_resolution_at_constant_rate() -> None:
    trace = modality_shift_trace(duration_s=1200, shift_at_s=600)
    before, after = trace.arrival_s < 600, trace.arrival_s >= 600
    assert before.sum() == pytest.approx(after.sum(), rel=0.05)
    images = trace.image_count > 0
    assert images[before].mean() == pytest.approx(0.10, abs=0.02)
    assert images[after].mean() == pytest.approx(0.70, abs=0.02)
    per_image = trace.image_width * trace.image_height
    assert per_image[after & images].mean() / per_image[before & images].mean() == pytest.approx(4.0, rel=0.15)


def test_mooncake_trace_is_replayed_with_its_own_arrivals_and_prompt_lengths(tmp_path: Path) -> None:
    from modalscale.autoscaler.traces import read_mooncake_trace

    path = tmp_path / "mooncake.csv"
    path.write_text("timestamp_ms,input_length,output_length,n_hash_blocks\n0,6758,500,14\n250,7322,490,15\n"
                    "3000,12,3,1\n")
    trace = read_mooncake_trace(path, ImageMix(image_fraction=0.0))
    assert list(trace.arrival_s) == [0.0, 0.25, 3.0] and list(trace.text_tokens) == [6758, 7322, 12]
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp_ms,input_length\nsoon,12\n")
    with pytest.raises(ValueError, match="line 2"):
        read_mooncake_trace(bad)


def test_servegen_rate_windows_generate_each_windows_rate_and_burstiness(tmp_path: Path) -> None:
    from modalscale.autoscaler.traces import servegen_trace

    path = tmp_path / "rates.csv"
    rows = ["client_id,window_start_s,rate_rps,cv,arrival_dist,dist_param1,dist_param2",
            "0,0,4.0,0.5,Gamma,4.0,0.0625",  # CV 0.5 at 4 req/s
            "1,0,2.0,3.0,Weibull,0.4,0.1",  # very bursty Weibull (shape 0.4: CV ~ 2.7)
            "0,600,0,0,,0,0", "1,600,1.0,1.0,,0,0"]  # second window: client 1 only, no law given: gamma with cv
    path.write_text("\n".join(rows) + "\n")
    trace = servegen_trace(path, start_s=0.0, duration_s=1200.0, random_state=3)
    first = trace.arrival_s[trace.arrival_s < 600]
    second = trace.arrival_s[trace.arrival_s >= 600]
    assert len(first) / 600 == pytest.approx(6.0, rel=0.1) and len(second) / 600 == pytest.approx(1.0, rel=0.15)
    bursty = tmp_path / "bursty.csv"
    bursty.write_text("\n".join(rows[:1] + rows[2:3]) + "\n")  # the Weibull client alone: CV ~3.1
    gaps = np.diff(servegen_trace(bursty, start_s=0.0, duration_s=600.0, random_state=4).arrival_s)
    assert gaps.std() / gaps.mean() > 2.0
    with pytest.raises(ValueError, match="no traffic"):
        servegen_trace(path, start_s=5000.0, duration_s=600.0)


# ------------------------------------------------------------------------- LLM-style traces (issue 20)

SPLITWISE_HEADER = ("model,hardware,prompt_size,batch_size,token_size,peak_power,average_power,prompt_time,"
                    "token_time,e2e_time,tensor_parallel")


def write_perf_model(path: Path) -> Path:
    rows = [SPLITWISE_HEADER,
            "m,gpu,128,1,128,1,1,60,40,0,8", "m,gpu,128,1,128,1,1,80,50,0,8",  # medians 70 ms, 45 ms
            "m,gpu,1024,1,128,1,1,170,45,0,8",
            "m,gpu,1024,2,128,1,1,999,999,0,8",  # batch 2: ignored
            "m,other,1024,1,128,1,1,999,999,0,8", "m,gpu,1024,1,128,1,1,999,999,0,4"]  # other setting: ignored
    path.write_text("\n".join(rows) + "\n")
    return path


def test_splitwise_perf_model_gives_prompt_plus_tokens_times_token_time(tmp_path: Path) -> None:
    from modalscale.autoscaler.traces import read_splitwise_perf_model

    perf = read_splitwise_perf_model(write_perf_model(tmp_path / "perf.csv"), model="m", hardware="gpu")
    assert perf.prompt_tokens == (128.0, 1024.0) and perf.prompt_ms == (70.0, 170.0) and perf.token_ms == 45.0
    # 576 tokens: halfway between 128 and 1024 -> 120 ms; 2048: extended along the last segment -> 170 + 100 * 1024/896
    ms = perf.service_ms(np.array([10, 576, 2048]), np.array([0, 100, 10]))
    assert ms == pytest.approx([70.0, 120.0 + 4500.0, 170.0 + 100.0 * 1024 / 896 + 450.0])
    with pytest.raises(ValueError, match="the file has"):
        read_splitwise_perf_model(tmp_path / "perf.csv", model="llama")


def test_thinning_fraction_puts_the_rate_between_a_tenth_and_one() -> None:
    from modalscale.autoscaler.traces import thinning_fraction

    assert thinning_fraction(0.5) == 1.0
    assert thinning_fraction(3.4) == pytest.approx(0.1) and thinning_fraction(1.0) == pytest.approx(0.1)
    assert thinning_fraction(13.3) == pytest.approx(0.01)


def test_long_request_trace_thins_mooncake_and_times_each_request_by_its_tokens(tmp_path: Path) -> None:
    from modalscale.autoscaler.traces import long_request_trace, read_splitwise_perf_model

    perf = read_splitwise_perf_model(write_perf_model(tmp_path / "perf.csv"), model="m", hardware="gpu")
    path = tmp_path / "mooncake.csv"
    n = 4000  # 4 req/s for 1000 s: kept 1/10
    lines = ["timestamp_ms,input_length,output_length,n_hash_blocks"]
    lines += [f"{i * 250},{128 if i % 2 else 1024},{i % 7},1" for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    trace = long_request_trace(path, perf, random_state=1)
    assert len(trace) == pytest.approx(n / 10, rel=0.15) and trace.arrival_s[0] == 0.0
    assert (trace.image_count == 0).all() and set(trace.text_tokens.tolist()) == {128, 1024}
    assert trace.service_ms is not None
    assert trace.service_ms == pytest.approx(perf.service_ms(trace.text_tokens, np.rint(
        (trace.service_ms - np.where(trace.text_tokens == 128, 70.0, 170.0)) / 45.0)))
    assert len(long_request_trace(path, perf, keep_fraction=1.0)) == n
    no_output = tmp_path / "bare.csv"
    no_output.write_text("timestamp_ms,input_length\n0,10\n")
    with pytest.raises(ValueError, match="output_length"):
        long_request_trace(no_output, perf)


def test_onoff_hour_is_the_span_with_the_most_idle_busy_switches(tmp_path: Path) -> None:
    from modalscale.autoscaler.traces import onoff_hour

    path = tmp_path / "rates.csv"
    rows = ["client_id,window_start_s,rate_rps,cv,arrival_dist,dist_param1,dist_param2"]
    steady = [1.0] * 8
    onoff = [0.0, 0.0, 0.5, 0.0, 0.3, 0.0, 0.4, 0.0]  # switches in 1800 s spans: 0-2: 2 ... 2-4: 3 (2 ties)
    for client, rates in (("a", steady), ("b", onoff)):
        rows += [f"{client},{w * 600},{r},1.0,,0,0" for w, r in enumerate(rates)]
    path.write_text("\n".join(rows) + "\n")
    # spans of 3 windows starting at 1..5 have 3 switches ([0, .5, 0], [.5, 0, .3], ...); the largest mean wins:
    # [.5, 0, .3] (start 1200 s) and [.3, 0, .4] (start 2400 s) tie at 0.8/3 -> the earlier
    assert onoff_hour(path, duration_s=1800.0) == ("b", 1200.0)


def test_servegen_onoff_trace_draws_the_clients_own_tokens(tmp_path: Path) -> None:
    from modalscale.autoscaler.traces import read_splitwise_perf_model, servegen_onoff_trace

    perf = read_splitwise_perf_model(write_perf_model(tmp_path / "perf.csv"), model="m", hardware="gpu")
    rates = tmp_path / "rates.csv"
    rates.write_text("client_id,window_start_s,rate_rps,cv,arrival_dist,dist_param1,dist_param2\n"
                     "x,0,0,0,,0,0\nx,600,2.0,1.0,,0,0\nx,1200,0,0,,0,0\ny,0,5.0,1.0,,0,0\n")
    pmf = tmp_path / "pmf.csv"
    pmf.write_text("client_id,window_start_s,field,value,prob\n"
                   "x,0,image_count,1,1.0\nx,0,image_tokens,100,1.0\nx,0,text_tokens,28,1.0\n"
                   "x,0,output_tokens,20,0.5\nx,0,output_tokens,40,0.5\n"
                   "y,0,image_count,0,1.0\ny,0,image_tokens,0,1.0\ny,0,text_tokens,5,1.0\ny,0,output_tokens,1,1.0\n")
    trace = servegen_onoff_trace(rates, pmf, perf, random_state=2)  # onoff_hour: client x
    assert len(trace) == pytest.approx(1200, rel=0.1)
    assert ((trace.arrival_s >= 600) & (trace.arrival_s < 1200)).all()  # x is busy only in its second window
    assert (trace.image_count == 1).all() and (trace.text_tokens == 28).all()
    assert trace.service_ms is not None
    assert set(np.round(trace.service_ms, 6).tolist()) == {70.0 + 20 * 45.0, 70.0 + 40 * 45.0}  # prompt 128
