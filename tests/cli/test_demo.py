"""mxnet_amp.cli.demo (cli/demo): a zoo network with random weights converted and run."""
import json

import pytest

from mxnet_amp.cli.main import build_parser
from mxnet_amp.cli.demo import run_demo
from mxnet_amp.errors import CLIError


def _args(*argv):
    return build_parser().parse_args(["demo", *argv])


def test_run_demo_refuses_sizes_and_counts_that_cannot_run():
    """--size under 16, --batch 0 and --runs 0 are a CLIError before anything is built."""
    for argv in (["--size", "8"], ["--batch", "0"], ["--runs", "0"]):
        with pytest.raises(CLIError, match="demo needs --size >= 16"):
            run_demo(_args(*argv))


def test_an_unknown_model_name_is_a_cli_error():
    """A name in neither MXNet's nor gluoncv's zoo is a CLIError naming it."""
    with pytest.raises(CLIError, match="no_such_net"):
        run_demo(_args("--model", "no_such_net", "--size", "32", "--runs", "1"))


def test_a_small_demo_writes_a_report_with_its_accuracy(tmp_path, capsys):
    """mobilenet0.25 at 32 px: the report names the model and dtype, records casts and a
    relative error under 0.1 between float32 and the low precision run."""
    report = tmp_path / "demo.json"
    code = run_demo(_args("--model", "mobilenet0.25", "--size", "32", "--batch", "1", "--runs", "1",
                          "--report", str(report), "--quiet"))
    assert code == 0
    data = json.loads(report.read_text())
    assert data["model"] == "mobilenet0.25" and data["target_dtype"] == "bfloat16"
    assert data["casts"] > 0 and 0 <= data["extra"]["relative_max_error"] < 0.1
    assert data["extra"]["input"] == "1x3x32x32"
    assert f"wrote {report}" in capsys.readouterr().err


def test_a_batch_run_chunk_by_chunk_gives_the_figures_of_one_run_and_binds_only_a_chunk(tmp_path,
                                                                                        monkeypatch):
    """--batch 5 --chunk 2: both models are bound for 2 samples only (memory that of a chunk,
    whatever --batch is), the 5 samples are the ones one run of 5 sees, and the error and
    top-1 agreement are those of that run."""
    from mxnet_amp.cli import demo
    bound = []
    bind = demo._bind
    monkeypatch.setattr(demo, "_bind",
                        lambda model, chunk, size: (bound.append(chunk), bind(model, chunk, size))[1])
    figures = []
    for chunk in ("2", "5"):
        report = tmp_path / f"demo{chunk}.json"
        assert run_demo(_args("--model", "mobilenet0.25", "--size", "32", "--batch", "5", "--chunk", chunk,
                              "--runs", "1", "--report", str(report), "--quiet")) == 0
        figures.append(json.loads(report.read_text())["extra"])
    assert bound == [2, 2, 5, 5]
    assert [f["chunk"] for f in figures] == [2, 5] and figures[0]["input"] == "5x3x32x32"
    # the same samples, so the same error up to float32 summation order: oneDNN picks its
    # kernels by batch size, and without native bf16 (AVX2) chunks of 2 and 5 differ in the
    # last bits (1.048001e-2 against 1.047996e-2)
    assert figures[0]["relative_max_error"] == pytest.approx(figures[1]["relative_max_error"],
                                                             rel=1e-4)
    assert figures[0]["top1_agreement"] == figures[1]["top1_agreement"]


def test_the_chunk_fits_half_the_memory_available_and_at_most_256_samples(monkeypatch):
    """Without --chunk: at most 256 samples, fewer where the lower bound of two bound models
    would pass half the memory available; --chunk beyond the memory is refused naming it."""
    from mxnet_amp.cli import demo
    monkeypatch.setattr(demo, "available_memory", lambda: 64 * 2**20)
    per_sample = 32 * 32 * 64 * 4   # a 32x32 activation of 64 channels, float32
    chunk = demo._check_chunk_memory(32, 20000, per_sample, None)
    need = 2 * (3 * 32 * 32 * 8 + per_sample) + 3 * 32 * 32 * 8
    assert 1 <= chunk < 256 and chunk * need <= 32 * 2**20 < (chunk + 1) * need
    assert demo._check_chunk_memory(32, 3, per_sample, None) == 3
    monkeypatch.setattr(demo, "available_memory", lambda: 64 * 2**30)
    assert demo._check_chunk_memory(32, 20000, per_sample, None) == 256
    monkeypatch.setattr(demo, "available_memory", lambda: 64 * 2**20)
    with pytest.raises(CLIError, match="--chunk 1000 needs at least .* give at most"):
        demo._check_chunk_memory(32, 20000, per_sample, 1000)


@pytest.mark.native_bf16   # native: 1 + --runs timed passes a model; elsewhere 1 (no timing)
def test_a_long_demo_says_how_long_before_it_runs(capsys, monkeypatch):
    """An estimate over the threshold is said on stderr first: samples, passes, chunks."""
    from mxnet_amp.cli import demo
    from mxnet_amp.mx.hardware import bf16_runs_natively
    passes = 4 if bf16_runs_natively() else 2
    monkeypatch.setattr(demo, "_SAY_ESTIMATE_AFTER", 0.0)
    assert run_demo(_args("--model", "mobilenet0.25", "--size", "32", "--batch", "3", "--chunk", "1",
                          "--runs", "1", "--quiet")) == 0
    err = capsys.readouterr().err
    assert "mxnet-amp: demo: about " in err and f"to run 3 samples {passes} times in 3 chunks of 1" in err


@pytest.mark.parametrize("seconds, said", [(40, "40 s"), (720, "12 min"), (3.5 * 3600, "3.5 h"),
                                           (86400 * 30, "30 days")])
def test_durations_are_said_in_the_unit_a_person_uses(seconds, said):
    from mxnet_amp.cli.demo import _duration
    assert _duration(seconds) == said
