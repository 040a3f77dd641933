"""``dlbench export-model NAME DIR``: a transformer (gpt2, smollm2-135m, bert-base, vit-b16 with their options,
or an ``hf:DIR``) written as a Hugging Face folder, so its weights go to any other tool
(:func:`dlbench.api.export_model`)."""

from __future__ import annotations

import argparse

from dlbench.cli.common import console
from dlbench.core.cell import DEFAULT_SEED


def cmd_export_model(args: argparse.Namespace) -> int:
    from dlbench import api
    from dlbench.planning import resolve

    resolve.check_settings("seed", args.seed)
    files = api.export_model(args.name, args.dir, force=args.force, seed=args.seed)
    console.print(f"{args.name} written to {args.dir}: {', '.join(files)} (read it back with --model hf:{args.dir})",
                  highlight=False, markup=False)
    return 0


def register(sub) -> None:
    p = sub.add_parser("export-model", help="write a transformer as a Hugging Face folder (config.json + safetensors)")
    p.add_argument("name", help="gpt2, smollm2-135m, bert-base or vit-b16, with options (gpt2:layers=2), or hf:DIR")
    p.add_argument("dir", help="the folder to write (new or empty)")
    p.add_argument("--force", action="store_true", help="write into a folder that is not empty")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the weights' seed (those a run starts from)")
    p.set_defaults(func=cmd_export_model)
