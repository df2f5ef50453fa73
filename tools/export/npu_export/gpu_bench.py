"""GPU benchmark of the CUDA backend against PyTorch eager and torch.compile(mode="reduce-overhead")
in the same run on the same GPU (run on the GPU machine; builds nothing). Medians of CUDA-event
timings after warm-up. Prints a table (ours, eager, compiled, floor, ratios) and writes JSON.

    python -m npu_export.gpu_bench --bin DIR --work DIR [--json FILE] [--no-compile]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from . import gpu_common as g

Row = dict[str, Any]
DECODE_POSITIONS = (128, 512, 1024, 2000)


def compiled_ms(fn: Any, args: tuple[Any, ...], repeat: int) -> float | None:
    """torch.compile(mode="reduce-overhead") timing, or None when compiling fails."""
    try:
        c = torch.compile(fn, mode="reduce-overhead")
        with torch.no_grad():
            for _ in range(3):
                c(*args)
            return g.cuda_ms(lambda: c(*args), repeat)
    except Exception as e:  # noqa: BLE001 - report, do not abort the benchmark
        print(f"torch.compile failed: {str(e)[:300]}", flush=True)
        return None


def _efficientnet_b0_075() -> torch.nn.Module:
    from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf

    setting, last = _efficientnet_conf("efficientnet_b0", width_mult=0.75, depth_mult=1.0)
    return EfficientNet(setting, 0.2, last_channel=last)


def _convnext_small_config() -> torch.nn.Module:
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    cfg = [
        CNBlockConfig(48, 96, 2),
        CNBlockConfig(96, 192, 2),
        CNBlockConfig(192, 384, 4),
        CNBlockConfig(384, None, 2),
    ]
    return ConvNeXt(cfg, stochastic_depth_prob=0.0)


def _vit_b16_small_config() -> torch.nn.Module:
    """ViT-B/16's shapes (224 px, 16 px patches, 768 wide, 12 heads, MLP 3072) at 4 layers of 12."""
    from torchvision.models.vision_transformer import VisionTransformer

    net = VisionTransformer(
        image_size=224, patch_size=16, num_layers=4, num_heads=12, hidden_dim=768, mlp_dim=3072
    )
    # torchvision zero-initializes the classifier, which would make every output 0
    torch.nn.init.normal_(net.heads.head.weight, std=0.02)
    return net


def _mobilenet_v2() -> torch.nn.Module:
    import torchvision

    return torchvision.models.mobilenet_v2(weights=None)


# Vision models outside the export CLI: name -> (constructor, input shape without batch).
EXTRA_VISION: dict[str, tuple[Any, tuple[int, ...]]] = {
    "mobilenet_v2": (_mobilenet_v2, (3, 224, 224)),
    "efficientnet_b0_w0.75": (_efficientnet_b0_075, (3, 128, 128)),
    "convnext_small_config": (_convnext_small_config, (3, 64, 64)),
    "vit_b16_small_config": (_vit_b16_small_config, (3, 224, 224)),
}


def export_extra(model: str, out: Path) -> Path:
    """Exports an EXTRA_VISION model (f32, random weights and BN statistics, batch 1) as the
    export CLI does for resnet: model.ir.json, weights.safetensors, io.safetensors."""
    from . import common, vision

    if (out / "meta.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    build, in_shape = EXTRA_VISION[model]
    shape = (1, *in_shape)
    with torch.device("meta"):
        meta_model = build()
    ir = common.extract(meta_model.eval(), (torch.empty(shape, device="meta"),), model_name=model)
    common.save_ir(ir, out / "model.ir.json")
    torch.manual_seed(0)
    net = build()
    vision.randomize_batchnorm(net, torch.Generator().manual_seed(0))
    net = net.eval()
    common.save_tensors(common.collect_weights(ir, net), out / "weights.safetensors")
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = net(x)
    common.save_tensors(
        {f"input.{ir.graph_inputs[0].name}": x, f"output.{ir.graph_outputs[0].name}": y},
        out / "io.safetensors",
    )
    common.write_json({"model": model, "input_shape": list(shape)}, out / "meta.json")
    return out


def startup(npu: str, work: Path, log: Path) -> dict[str, Any]:
    """Wall time of ``npu run --backend cuda`` on a one-op graph (relu of a [4, 8] f32 tensor),
    with an empty kernel cache (first) and then with the cache it filled (warm, median of 5)."""
    import os
    import shutil
    import subprocess

    from . import common

    d = work / "one-op"
    d.mkdir(parents=True, exist_ok=True)
    x = torch.randn(4, 8)
    with torch.device("meta"):
        ir = common.extract(torch.nn.ReLU().eval(), (torch.empty(4, 8, device="meta"),), model_name="relu")
    common.save_ir(ir, d / "model.ir.json")
    common.save_tensors({f"input.{ir.graph_inputs[0].name}": x}, d / "io.safetensors")
    cache = d / "kernel-cache"
    shutil.rmtree(cache, ignore_errors=True)
    env = {**os.environ, "NPU_CUDA_CACHE": str(cache)}
    cmd = [npu, "run", str(d / "model.ir.json"), "--backend", "cuda", "--inputs", str(d / "io.safetensors")]
    cmd += ["--outputs", str(d / "out.safetensors")]
    times = []
    for _ in range(6):
        t = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
        times.append(time.perf_counter() - t)
        with log.open("a") as f:
            f.write(f"$ {' '.join(cmd)}\n{res.stdout}{res.stderr}\n")
        if res.returncode != 0:
            raise RuntimeError(f"npu run failed: {res.stderr.strip()[-400:]}")
    warm = sorted(times[1:])[len(times[1:]) // 2]
    # Where a warm start goes: the backend's start-up phases, as `--profile` prints them.
    res = subprocess.run([*cmd, "--profile"], capture_output=True, text=True, env=env)
    phases = next((ln for ln in (res.stdout + res.stderr).splitlines() if ln.startswith("start-up of")), "")
    return {
        "cold_s": times[0],
        "warm_s": warm,
        "target_s": 0.3,
        "graph": "relu [4, 8] f32, IR JSON",
        "phases": phases,
    }


def resnet(
    bin_dir: Path, npu: str, work: Path, model: str, batch: int, bw: float, link: float, cc: bool, log: Path
) -> Row:
    from . import vision

    if model in EXTRA_VISION:
        d = export_extra(model, work / f"{model}-b{batch}")
        build = EXTRA_VISION[model][0]
    else:
        d = g.export(model, work / f"{model}-b{batch}", ["--batch", str(batch)], log)
        build = vision.MODELS[model][0]
    # The CUDA backend's layout (target gpu: channels-last); the NPU target's channel-padded
    # NCHW program is timed too, for the record.
    prog = g.compile_program(npu, d / "model.ir.json", d / "f16-gpu.npubin", "f16", log, target="gpu")
    t = g.time_program(bin_dir, prog, d, 50, log)
    nchw = g.compile_program(npu, d / "model.ir.json", d / "f16.npubin", "f16", log)
    t_nchw = g.time_program(bin_dir, nchw, d, 50, log)
    torch.manual_seed(0)
    net = build().eval().half().cuda()
    x = (
        next(v for k, v in load_file(str(d / "io.safetensors")).items() if k.startswith("input."))
        .half()
        .cuda()
    )
    with torch.no_grad():
        eager = g.cuda_ms(lambda: net(x), 50)
    comp = compiled_ms(net, (x,), 50) if cc else None
    wbytes = sum(p.numel() * p.element_size() for p in net.parameters())
    # The whole run's bound: the graph plus the caller's f32 input and logits over the link.
    io_bytes = batch * (math.prod(x.shape[1:]) + 1000) * 4
    wall_bound = t["gpu_ms"] + io_bytes / (link * 1e9) * 1e3
    return {
        "name": f"{model} f16 batch {batch}",
        "ours_ms": t["gpu_ms"],
        "ours_target": "gpu (channels-last)",
        "ours_npu_target_ms": t_nchw["gpu_ms"],
        "ours_wall_ms": t["wall_ms"],
        "ours_wall_phases_us": t.get("phases"),
        "wall_bound_ms": wall_bound,
        "wall_bound_doc": "graph + f32 input and output bytes / host-link bandwidth; target wall <= 1.15x",
        "eager_ms": eager,
        "compiled_ms": comp,
        "floor_ms": wbytes / (bw * 1e9) * 1e3,
        "floor_doc": "f16 weight bytes / copy bandwidth",
        "graph": t["graph"],
        **kernel_stats(t),
    }


def kernel_stats(t: dict[str, Any]) -> Row:
    """Kernels per run and the top kernels by GPU time, where the binary reports them."""
    return {k: t[k] for k in ("kernels", "top_kernels") if k in t}


def qwen_inputs(cfg: Any, p: int, s: int, max_len: int, dtype: torch.dtype) -> list[torch.Tensor]:
    from . import qwen

    ids = torch.arange(s, dtype=torch.int64) * 7919 % cfg.vocab_size
    return [v.cuda() for v in qwen.step_inputs(ids, p, max_len, dtype).values()]


def qwen_rows(bin_dir: Path, npu: str, work: Path, bw: float, cc: bool, log: Path) -> list[Row]:
    from . import qwen

    d = g.export(
        "qwen2.5-1.5b",
        work / "qwen2.5-1.5b-bf16",
        ["--dtype", "bfloat16", "--decode-steps", "32", "--no-hf-check"],
        log,
    )
    d32 = g.export_qwen_32k(work, log)
    bench = str(bin_dir / "npu-cuda-bench")
    w = str(d / "weights.safetensors")
    pre = g.compile_program(npu, d / "prefill.ir.json", d / "prefill-bf16.npubin", "bf16", log)
    dec = g.compile_program(npu, d / "decode.ir.json", d / "decode-bf16.npubin", "bf16", log)
    dec32 = g.compile_program(npu, d32 / "decode.ir.json", d32 / "decode-bf16.npubin", "bf16", log)
    pos = ",".join(map(str, DECODE_POSITIONS))
    ours_dec = g.sh_json([bench, "decode-at", "--decode", str(dec), "--weights", w, "--positions", pos], log)
    ours_32k = g.sh_json(
        [bench, "decode-at", "--decode", str(dec32), "--weights", w, "--positions", "32000"], log
    )
    ours_pre = g.time_program(bin_dir, pre, d, 20, log, prefix="prefill.input.")
    # PyTorch: the same wrapper the IR comes from, static caches on the GPU.
    cfg = qwen.build_config("qwen2.5-1.5b", None)
    dt = torch.bfloat16
    torch.manual_seed(0)
    m = qwen.build_model(cfg, dt, None, meta=False)
    # Bytes a step must read: every unique parameter once (the tied embedding / lm_head counts
    # once; the weight file stores it under both names, so its size overstates the floor).
    wbytes = sum(p.numel() * p.element_size() for p in m.parameters())
    floor = wbytes / (bw * 1e9) * 1e3
    wrapper = qwen.make_wrapper(m).eval().cuda()

    def caches(max_len: int) -> tuple[torch.Tensor, ...]:
        shape = (1, cfg.num_key_value_heads, max_len, cfg.head_dim)
        return tuple(torch.randn(shape, dtype=dt, device="cuda") for _ in range(2 * cfg.num_hidden_layers))

    rows: list[Row] = []
    with torch.no_grad():
        kv = caches(2048)
        eager_dec = []
        for p in DECODE_POSITIONS:
            args = (*qwen_inputs(cfg, p, 1, 2048, dt), *kv)
            eager_dec.append(g.cuda_ms(lambda args=args: wrapper(*args), 20))
        args = (*qwen_inputs(cfg, 2000, 1, 2048, dt), *kv)
        comp_dec = compiled_ms(wrapper, args, 20) if cc else None
        pre_args = (*qwen_inputs(cfg, 0, 128, 2048, dt), *kv)
        eager_pre = g.cuda_ms(lambda: wrapper(*pre_args), 10)
        comp_pre = compiled_ms(wrapper, pre_args, 10) if cc else None
        kv, args, pre_args = (), (), ()
        torch.cuda.empty_cache()
        kv32 = caches(32768)
        args32 = (*qwen_inputs(cfg, 32000, 1, 32768, dt), *kv32)
        eager_32k = g.cuda_ms(lambda: wrapper(*args32), 10)
    ours_pts = [pt["gpu_ms"] for pt in ours_dec["points"]]
    kv_bytes_32k = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * 32001 * cfg.head_dim * 2
    rows.append(
        {
            "name": f"qwen2.5-1.5b decode, cache 2048, pos {pos} (mean)",
            "ours_ms": sum(ours_pts) / len(ours_pts),
            "ours_points_ms": ours_pts,
            "ours_wall_ms": [pt["wall_ms"] for pt in ours_dec["points"]],
            "eager_ms": sum(eager_dec) / len(eager_dec),
            "compiled_ms": comp_dec,
            "compiled_doc": "position 2000 only",
            "floor_ms": floor,
            "floor_doc": "bf16 weight bytes / copy bandwidth",
            "target_ms": 1.5,
            "graph": ours_dec["graph"],
            **kernel_stats(ours_dec),
        }
    )
    rows.append(
        {
            "name": "qwen2.5-1.5b decode at 32000, cache 32768",
            "ours_ms": ours_32k["points"][0]["gpu_ms"],
            "ours_wall_ms": ours_32k["points"][0]["wall_ms"],
            "eager_ms": eager_32k,
            "compiled_ms": None,
            "floor_ms": (wbytes + kv_bytes_32k) / (bw * 1e9) * 1e3,
            "floor_doc": "(weights + K/V of 32001 positions) / copy bandwidth",
            "target_ms": 2.0,
            "graph": ours_32k["graph"],
            **kernel_stats(ours_32k),
        }
    )
    rows.append(
        {
            "name": "qwen2.5-1.5b prefill 128 tokens",
            "ours_ms": ours_pre["gpu_ms"],
            "ours_wall_ms": ours_pre["wall_ms"],
            "eager_ms": eager_pre,
            "compiled_ms": comp_pre,
            "floor_ms": floor,
            "floor_doc": "weight bytes / copy bandwidth (compute floor lower on H100)",
            "target_ms": 3.0,
            "graph": ours_pre["graph"],
            **kernel_stats(ours_pre),
        }
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m npu_export.gpu_bench", description=__doc__)
    p.add_argument("--bin", type=Path, default=Path(".device"))
    p.add_argument("--work", type=Path, default=Path("/tmp/npu-gpu"))
    p.add_argument("--json", type=Path, default=Path("benchmarks/results/cuda-h100.json"))
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    p.add_argument("--skip-qwen", action="store_true")
    p.add_argument("--only", default="", help="comma-separated vision models to run (default: all)")
    a = p.parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    log = a.work / "gpu_bench.log"
    npu = str(a.bin / "npu")
    cc = not a.no_compile
    bw = g.copy_bandwidth_gbs()
    link = g.host_link_gbs()
    print(
        f"{torch.cuda.get_device_name()}: copy bandwidth (read + write) {bw:.0f} GB/s, "
        f"host to device (page-locked) {link:.1f} GB/s",
        flush=True,
    )
    rows: list[Row] = []
    p_only = set(a.only.split(",")) if a.only else None
    targets = {("resnet50", 1): 0.45, ("resnet50", 64): 3.0, ("resnet18", 1): 0.25}
    vision_rows = [("resnet18", 1), ("resnet50", 1), ("resnet50", 64), *((m, 1) for m in EXTRA_VISION)]
    for model, batch in vision_rows:
        if p_only is not None and model not in p_only:
            continue
        t = time.perf_counter()
        try:
            r = resnet(a.bin, npu, a.work, model, batch, bw, link, cc, log)
            r["target_ms"] = targets.get((model, batch))
            rows.append(r)
        except Exception as e:  # noqa: BLE001 - one failure must not hide the rest
            rows.append({"name": f"{model} f16 batch {batch}", "error": str(e)[-400:]})
        print(f"[{model} b{batch}] {time.perf_counter() - t:.1f} s", flush=True)
    start: dict[str, Any] = {}
    try:
        start = startup(npu, a.work, log)
    except Exception as e:  # noqa: BLE001
        start = {"error": str(e)[-400:]}
    print(f"start-up: {start}", flush=True)
    if not a.skip_qwen:
        t = time.perf_counter()
        try:
            rows.extend(qwen_rows(a.bin, npu, a.work, bw, cc, log))
        except Exception as e:  # noqa: BLE001
            rows.append({"name": "qwen2.5-1.5b", "error": str(e)[-400:]})
        print(f"[qwen] {time.perf_counter() - t:.1f} s", flush=True)
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "copy_bandwidth_gbs": bw,
        "host_link_gbs": link,
        "timing": "medians of CUDA-event times after warm-up; ours = the replayed CUDA graph of one run",
        "rows": rows,
        "startup": start,
    }
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(result, indent=1) + "\n")

    def f(v: Any) -> str:
        return f"{v:.3f}" if isinstance(v, float) else "-"

    print(
        f"\n{'benchmark':<52} {'ours':>8} {'eager':>8} {'compiled':>9} {'floor':>7} {'target':>7} "
        f"{'/eager':>7} {'/comp':>6} {'/floor':>7}"
    )
    for r in rows:
        if "error" in r:
            print(f"{r['name']:<52} ERROR {r['error'][-200:]}")
            continue
        o, e, c, fl = r["ours_ms"], r["eager_ms"], r["compiled_ms"], r["floor_ms"]
        print(
            f"{r['name'][:52]:<52} {f(o):>8} {f(e):>8} {f(c):>9} {f(fl):>7} {f(r.get('target_ms')):>7} "
            f"{f(o / e):>7} {f(o / c) if c else '-':>6} {f(o / fl):>7}"
        )
    print("(ms; ratios are ours / theirs)")
    print("\nvision rows compiled for target gpu (channels-last); the npu target's NCHW program:")
    for r in rows:
        if "ours_npu_target_ms" in r:
            print(f"{r['name'][:52]:<52} gpu {f(r['ours_ms']):>8}  npu {f(r['ours_npu_target_ms']):>8}")
    print("\nwhole runs (upload, graph, download; target wall <= 1.15 x bound):")
    for r in rows:
        if "wall_bound_ms" in r:
            wall, bound = r["ours_wall_ms"], r["wall_bound_ms"]
            print(
                f"{r['name'][:52]:<52} wall {wall:8.3f}  bound {bound:8.3f}  wall/bound {wall / bound:6.2f}"
                + g.phases_text(r.get("ours_wall_phases_us"))
            )
    print("\nkernels per run and top kernels by GPU time (one eager run, CUDA events per launch):")
    for r in rows:
        if "kernels" in r:
            top = ", ".join(
                f"{k['name']} x{k['count']} {k['ms']:.3f} ms" for k in r.get("top_kernels", [])[:5]
            )
            print(f"{r['name'][:52]:<52} {r['kernels']:>5}  {top}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
