"""CPU benchmark: npu against PyTorch in the same run, on the same machine and thread count.

Prints a table and writes JSON. Vision models at batch 1 in f32 (ResNet-18/50, MobileNetV2,
EfficientNet-B0 at width 0.75, a small ConvNeXt; ``--models``) always; Qwen2.5-1.5B (bf16, 128-token
prefill and greedy decode) when ``--qwen-dir`` points at a full export
(``python -m npu_export qwen2.5-1.5b --out DIR``). Also measures the machine's copy bandwidth, and
the bandwidth the decode step achieves reading the weights.

    python -m npu_export.bench_cpu [--npu target/release/npu] [--work DIR] [--qwen-dir DIR]
        [--repeat N] [--rounds N] [--tokens N] [--json benchmarks/results/cpu.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch


def sh(cmd: list[str]) -> str:
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return res.stdout


def sh_peak_rss(cmd: list[str]) -> tuple[str, int]:
    """``sh`` that also returns the child's peak resident memory in bytes (Linux)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd, out)
    return out, usage.ru_maxrss * 1024


def median_ms(fn: Any, repeat: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def copy_bandwidth_gbs() -> float:
    """Median over runs of (bytes read + bytes written) / time for a 1 GiB tensor copy."""
    src = torch.ones(1 << 28, dtype=torch.float32)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), repeat=10, warmup=2)
    return 2 * src.numel() * 4 / (ms / 1e3) / 1e9


def ensure_export(model: str, out: Path, extra: list[str]) -> None:
    if not (out / "weights.safetensors").exists():
        subprocess.run([sys.executable, "-m", "npu_export", model, "--out", str(out), *extra], check=True)


def cpu_model() -> tuple[str, list[str]]:
    """The CPU's model name and its vector-ISA flags that the kernels dispatch on."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                name = line.split(":", 1)[1].strip()
            if line.startswith("flags") and ":" in line:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    wanted = ["avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile"]
    return name, [f for f in wanted if f in flags]


def _vision_net(model: str, d: Path) -> torch.nn.Module:
    """The PyTorch model behind an export in ``d``, with the exported weights."""
    import torchvision
    from safetensors.torch import load_file

    from .gpu_bench import EXTRA_VISION

    if model in EXTRA_VISION:
        net = EXTRA_VISION[model][0]()
    else:
        net = getattr(torchvision.models, model)(weights=None)
    net = net.eval()
    net.load_state_dict(load_file(str(d / "weights.safetensors")), strict=False)
    return net


def bench_vision(npu: str, work: Path, model: str, repeat: int, rounds: int) -> dict[str, Any]:
    """A vision model at batch 1 in f32: ResNets from the export CLI, the models of
    ``gpu_bench.EXTRA_VISION`` (MobileNetV2, EfficientNet-B0 w0.75, a small ConvNeXt, a
    ViT-B/16-shaped transformer of 4 layers). ``rounds`` alternations of ``npu run --repeat``
    and the PyTorch loop, each a median over ``repeat`` runs: on a shared machine whose speed
    drifts within a minute, both sides then see the same drift; the ratio is the median of the
    rounds' ratios."""
    from safetensors.torch import load_file

    from .gpu_bench import EXTRA_VISION, export_extra

    d = work / model
    if model in EXTRA_VISION:
        export_extra(model, d)
    else:
        ensure_export(model, d, [])
    prog = d / "f32.npubin"
    sh([npu, "compile", str(d / "model.ir.json"), "-o", str(prog), "--target", "cpu", "--dtype", "f32"])
    net = _vision_net(model, d)
    x = next(v for k, v in load_file(str(d / "io.safetensors")).items() if k.startswith("input."))
    ours_r: list[float] = []
    theirs_r: list[float] = []
    for _ in range(max(1, rounds)):
        out = sh(
            [
                npu,
                "run",
                str(prog),
                "--weights",
                str(d / "weights.safetensors"),
                "--inputs",
                str(d / "io.safetensors"),
                "--repeat",
                str(repeat),
            ]
        )
        m = re.search(r"median ([0-9.]+) ms", out)
        assert m, out
        ours_r.append(float(m.group(1)))
        with torch.inference_mode():
            theirs_r.append(median_ms(lambda: net(x), repeat))
    return {
        "model": model,
        "batch": 1,
        "dtype": "float32",
        "npu_ms": statistics.median(ours_r),
        "pytorch_ms": statistics.median(theirs_r),
        "ratio": statistics.median(o / t for o, t in zip(ours_r, theirs_r, strict=True)),
        "rounds_npu_ms": ours_r,
        "rounds_pytorch_ms": theirs_r,
    }


def bench_qwen(npu: str, qdir: Path, tokens: int, repeat: int) -> dict[str, Any]:
    from safetensors.torch import load_file
    from transformers import Qwen2Config, Qwen2ForCausalLM

    for g in ("prefill", "decode"):
        sh([npu, "compile", str(qdir / f"{g}.ir.json"), "-o", str(qdir / f"{g}.npubin"), "--dtype", "bf16"])
    ids = [(i * 7919) % 151936 for i in range(128)]
    prefill_runs, decode_runs, copy_runs, peak_rss = [], [], [], 0
    for _ in range(max(1, repeat)):
        out, rss = sh_peak_rss(
            [
                npu,
                "generate",
                "--prefill",
                str(qdir / "prefill.npubin"),
                "--decode",
                str(qdir / "decode.npubin"),
                "--weights",
                str(qdir / "weights.safetensors"),
                "--prompt-ids",
                ",".join(map(str, ids)),
                "--max-new-tokens",
                str(tokens + 1),
            ]
        )
        peak_rss = max(peak_rss, rss)
        pm = re.search(r"prefill: ([0-9.]+) ms", out)
        dm = re.search(r"\(([0-9.]+) ms/token", out)
        assert pm and dm, out
        prefill_runs.append(float(pm.group(1)))
        decode_runs.append(float(dm.group(1)))
        # the copy bandwidth right after each run: the share below compares like with like on
        # a machine whose speed drifts between the start of the bench and this point
        copy_runs.append(copy_bandwidth_gbs())
    ours_prefill, ours_decode = statistics.median(prefill_runs), statistics.median(decode_runs)

    meta = json.loads((qdir / "meta.json").read_text())
    cfg = {k: v for k, v in meta["config"].items() if k not in ("architectures", "rope_theta")}
    torch.set_default_dtype(torch.bfloat16)
    model = Qwen2ForCausalLM(Qwen2Config(**cfg)).eval()
    torch.set_default_dtype(torch.float32)
    sd = {k.removeprefix("model."): v for k, v in load_file(str(qdir / "weights.safetensors")).items()}
    model.load_state_dict(sd, strict=False)
    x = torch.tensor([ids])
    with torch.inference_mode():
        theirs_prefill = median_ms(lambda: model(x, use_cache=True), max(1, repeat), warmup=1)
        out = model(x, use_cache=True)
        past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
        steps = []
        for _ in range(tokens):
            t = time.perf_counter()
            out = model(tok, past_key_values=past, use_cache=True)
            steps.append((time.perf_counter() - t) * 1e3)
            past, tok = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
    theirs_decode = statistics.median(steps)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    shares = [weight_bytes / (d / 1e3) / 1e9 / c for d, c in zip(decode_runs, copy_runs, strict=True)]
    return {
        "model": "qwen2.5-1.5b",
        "dtype": "bfloat16",
        "prompt_tokens": 128,
        "decode_tokens": tokens,
        "npu_prefill_ms": ours_prefill,
        "pytorch_prefill_ms": theirs_prefill,
        "prefill_ratio": ours_prefill / theirs_prefill,
        "npu_decode_ms_per_token": ours_decode,
        "pytorch_decode_ms_per_token": theirs_decode,
        "decode_ratio": ours_decode / theirs_decode,
        "weight_bytes": weight_bytes,
        "npu_decode_weight_read_gbs": weight_bytes / (ours_decode / 1e3) / 1e9,
        "copy_bandwidth_after_each_run_gbs": copy_runs,
        "npu_decode_share_of_copy_bandwidth": statistics.median(shares),
        "npu_generate_peak_rss_gb": peak_rss / 1e9,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m npu_export.bench_cpu", description=__doc__)
    p.add_argument("--npu", default="target/release/npu")
    p.add_argument("--work", type=Path, default=Path("/tmp/npu-bench"))
    p.add_argument("--qwen-dir", type=Path, default=None)
    p.add_argument("--repeat", type=int, default=10, help="runs per round (median)")
    p.add_argument("--rounds", type=int, default=3, help="npu/PyTorch alternations per vision model")
    p.add_argument("--qwen-repeat", type=int, default=3)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--json", type=Path, default=Path("benchmarks/results/cpu.json"))
    p.add_argument(
        "--models",
        default="resnet18,resnet50,mobilenet_v2,efficientnet_b0_w0.75,convnext_small_config,vit_b16_small_config",
        help="comma-separated vision models (the export CLI's ResNets, gpu_bench.EXTRA_VISION)",
    )
    a = p.parse_args(argv)
    threads = int(os.environ.get("THREADS", os.cpu_count() or 1))
    torch.set_num_threads(threads)
    os.environ["RAYON_NUM_THREADS"] = str(threads)

    models = [m for m in a.models.split(",") if m]
    cpu, flags = cpu_model()
    result: dict[str, Any] = {
        "machine": {
            "cpu": cpu,
            "flags": flags,
            "threads": threads,
            "torch": torch.__version__,
        },
        "copy_bandwidth_gbs": copy_bandwidth_gbs(),
        "vision": [bench_vision(a.npu, a.work, m, a.repeat, a.rounds) for m in models],
    }
    print(f"{cpu} ({' '.join(flags)}); threads {threads}")
    print(f"copy bandwidth (read + write) {result['copy_bandwidth_gbs']:.1f} GB/s")
    print(f"{'model':<22} {'what':<22} {'npu':>12} {'PyTorch':>12} {'ratio':>7}")
    for r in result["vision"]:
        print(
            f"{r['model']:<22} {'batch 1 f32':<22} {r['npu_ms']:>9.2f} ms {r['pytorch_ms']:>9.2f} ms "
            f"{r['ratio']:>6.2f}x"
        )
    if a.qwen_dir:
        q = bench_qwen(a.npu, a.qwen_dir, a.tokens, a.qwen_repeat)
        result["qwen"] = q
        print(
            f"{'qwen2.5-1.5b':<14} {'bf16 prefill 128':<22} {q['npu_prefill_ms']:>9.1f} ms "
            f"{q['pytorch_prefill_ms']:>9.1f} ms {q['prefill_ratio']:>6.2f}x"
        )
        print(
            f"{'qwen2.5-1.5b':<14} {'bf16 decode / token':<22} {q['npu_decode_ms_per_token']:>9.1f} ms "
            f"{q['pytorch_decode_ms_per_token']:>9.1f} ms {q['decode_ratio']:>6.2f}x"
        )
        print(f"{'qwen2.5-1.5b':<14} {'npu generate peak RSS':<22} {q['npu_generate_peak_rss_gb']:>9.2f} GB")
        print(
            f"decode reads {q['weight_bytes'] / 1e9:.2f} GB of weights per token: "
            f"{q['npu_decode_weight_read_gbs']:.1f} GB/s, {q['npu_decode_share_of_copy_bandwidth']:.0%} "
            "of the copy bandwidth measured after each run (median of the runs' shares)"
        )
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
