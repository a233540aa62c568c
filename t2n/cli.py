"""The ``t2n`` command: ``export``, ``check`` (CI manifests) and ``ops``.

Exit codes (the same for every subcommand):

- 0: done (and, with ``--check``, tract matched PyTorch)
- 1: a check failed: tract's outputs differ from PyTorch's, tract refused or crashed on the
  archive, or (``t2n check``) at least one model of the manifest did not pass
- 2: usage error, unreadable or refused model file, bad input spec, unsupported model,
  unwritable output path
- 3: internal error in t2n itself (a bug: rerun with ``--debug`` for the traceback)
- 130: interrupted (Ctrl-C); no partial output is left behind

The archive reaches OUT only when the export succeeds, its check included: after a failed
check or an error OUT keeps what it held before. OUT (and --keep-failed PATH, --keep DIR's
archives, --junit/--json reports) replaces only what t2n wrote there before: a user's folder
or file is refused with exit code 2, nothing changed (t2n.write.output_paths).

Errors are printed as one ``t2n: error: ...`` line on stderr (a list of unsupported ops
adds one indented line per op), never as a Python traceback unless ``--debug`` is given.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import warnings

import click

from t2n import __version__
from t2n.errors import CheckFailedError, T2NError, UsageError
from t2n.jsonreport import result_dict

EXIT_OK, EXIT_CHECK_FAILED, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

_STATE = {"debug": bool(os.environ.get("T2N_DEBUG"))}


def _err(text: str) -> None:
    click.echo(text, err=True)


def _print_error(prefix: str, message: str) -> None:
    lines = str(message).strip().splitlines() or [""]
    _err(f"t2n: {prefix}: {lines[0]}")
    for line in lines[1:]:
        _err("  " + line if not line.startswith("  ") else line)


class _T2NGroup(click.Group):
    """A click group that turns every failure into a one-line message and an exit code."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True,
             **extra):
        try:
            rv = super().main(args, prog_name or "t2n", complete_var,
                              standalone_mode=False, **extra)
        except click.exceptions.Abort:
            _err("t2n: interrupted; nothing was written")
            sys.exit(EXIT_INTERRUPTED)
        except click.ClickException as e:
            no_args = getattr(click.exceptions, "NoArgsIsHelpError", ())
            if no_args and isinstance(e, no_args):  # plain `t2n`: show the help
                click.echo(e.ctx.get_help())
                sys.exit(EXIT_OK)
            hint = ""
            ctx = getattr(e, "ctx", None)
            if ctx is not None:
                hint = f" (see '{ctx.command_path} --help')"
            _print_error("error", e.format_message() + hint)
            sys.exit(EXIT_USAGE)
        except T2NError as e:
            if _STATE["debug"]:
                traceback.print_exc()
            prefix = "check failed" if e.exit_code == EXIT_CHECK_FAILED else "error"
            kept = getattr(e, "kept_archive", None)
            notes = "".join("\n" + n for n in getattr(e, "__notes__", ()))  # capture hints
            _print_error(prefix, str(e) + (f" (the archive is kept at {kept})" if kept else "")
                         + notes)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            _err("t2n: interrupted; nothing was written")
            sys.exit(EXIT_INTERRUPTED)
        except Exception as e:  # a bug in t2n: say so in one line, trace only on request
            if _STATE["debug"]:
                traceback.print_exc()
            text = str(e).strip().splitlines()
            _err(f"t2n: internal error: {type(e).__name__}: {text[0] if text else ''}")
            _err("  this is a bug in t2n; rerun with 't2n --debug ...' for the traceback and "
                 "please report it")
            sys.exit(EXIT_INTERNAL)
        sys.exit(rv if isinstance(rv, int) else EXIT_OK)


# one option, two commands (export, llm): modules of @t2n.mapping functions to import first
_EXTENSION_OPTION = click.option(
    "--extension", "extension_modules", multiple=True, metavar="MODULE",
    help="Import MODULE first: its @t2n.mapping functions convert ops t2n has no mapping "
         "for, e.g. torch.library custom ops (repeatable; docs/extensions.md).")


@click.group(name="t2n", cls=_T2NGroup,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show Python tracebacks for errors.")
# the version of the code that runs: an editable install's metadata keeps the version of
# its last `pip install`, so importlib.metadata would report an old one after a bump
@click.version_option(__version__, prog_name="t2n")
def cli(debug: bool):
    """t2n: export PyTorch models to NNEF archives for the tract inference engine.

    \b
    Export a model and check that tract reproduces PyTorch's outputs:
      t2n export model.pt -o model.nnef.tar --input x:1x3x224x224:f32 --check
    Check every model of a manifest (for CI):
      t2n check models.toml --junit report.xml
    Export a language model (prefill + decoding) and check it generates the same tokens:
      t2n llm ./saved-model-dir -o lm.nnef.tgz --check
    List the aten operators t2n converts:
      t2n ops

    Exit codes: 0 ok, 1 check failed, 2 usage error / unsupported model / bad input,
    3 internal error (rerun with --debug), 130 interrupted.
    """
    _STATE["debug"] = debug or bool(os.environ.get("T2N_DEBUG"))


class TableChoice(click.Choice):
    """A choice among the names of one of t2n's tables (targets, weight formats, compute
    dtypes), read from the table itself when a command needs it (its help or its parsing):
    the CLI lists no names of its own, and importing it loads no torch."""

    def __init__(self, table: str):
        self._table = table  # "module:attribute", a dict keyed by the names
        super().__init__(())

    @property
    def choices(self):
        import importlib

        module, attr = self._table.split(":")
        return tuple(getattr(importlib.import_module(module), attr))

    @choices.setter
    def choices(self, _value):  # click.Choice.__init__ assigns it
        pass


# ---------------------------------------------------------------------------- export
@cli.command("export")
@click.argument("model", metavar="MODEL")
@click.option("-o", "--output", "output", required=True, metavar="OUT",
              help="Archive to write: OUT.tar (tar, loads fastest), OUT.tgz (gzip tar: "
                   "decompressed at every load), or a folder (OUT.nnef, no suffix, or any "
                   "name ending in /). Only an NNEF archive at OUT is replaced.")
@click.option("-i", "--input", "inputs", multiple=True, metavar="NAME:DIMS:DTYPE",
              help="One model input, in order: e.g. x:1x3x224x224:f32 or ids:2x16:i64 "
                   "(repeat for each input; DIMS 'scalar' for rank 0).")
@click.option("--check", is_flag=True,
              help="Run the archive in tract and compare with PyTorch on the example inputs, "
                   "fresh ones of the same shapes, and the --dynamic axes at another size "
                   "(exit 1 on mismatch; OUT is then not written).")
@click.option("--keep-failed", "keep_failed", metavar="PATH", default=None,
              help="With --check: move the archive of a failed check to PATH, for inspection.")
@click.option("--no-load-check", "no_load_check", is_flag=True,
              help="Skip loading the archive in its engine before accepting it (done by "
                   "default, in a child process: an archive the engine refuses is not "
                   "written, exit 2).")
@click.option("--dynamic", multiple=True, metavar="NAME:AXIS=SYM",
              help="Make an input axis a symbol, e.g. x:0=B (repeatable); it is 1 or more at "
                   "run time, x:0=B>=0 lets it be 0, x:0=B<=64 declares its most size.")
@click.option("--stream", "stream", metavar="SYM", default=None,
              help="Streaming export over the --dynamic symbol SYM: forms tract can pulse, "
                   "the output delay in the report, and with --check a chunk-by-chunk run "
                   "of the pulsed model compared with PyTorch.")
@click.option("--pulse", "pulse", type=click.IntRange(min=1), default=None, metavar="N",
              help="Steps per chunk of the --stream check (default: a small divisor of the "
                   "example length).")
@click.option("--output-name", "output_names", multiple=True, metavar="NAME",
              help="Name of each output, in order (default output_0, output_1, ...).")
@click.option("--int-range", "int_range", multiple=True, metavar="[NAME=]LO:HI",
              help="Integer example inputs (and --check's fresh ones) are drawn from [LO, HI) "
                   "(default 0:10); NAME=LO:HI sets one input's range, e.g. --int-range "
                   "ids=0:1000 --int-range mask=0:2 (repeatable).")
@click.option("--constant-output", "constant_outputs", multiple=True, metavar="NAME",
              help="An output meant to depend on no input (repeatable): no warning, and "
                   "--check does not fail it for being constant.")
@click.option("--seed", default=0, show_default=True, type=int,
              help="Seed of the random example inputs.")
@click.option("--rtol", default=1e-4, show_default=True, type=float,
              help="Relative tolerance of --check (float outputs).")
@click.option("--atol", default=1e-5, show_default=True, type=float,
              help="Absolute tolerance of --check (float outputs).")
@click.option("--trust-pickle", is_flag=True,
              help="Allow MODEL to be a pickled nn.Module (torch.save): this runs code "
                   "from the file, use only on files you trust.")
@click.option("--compact", is_flag=True,
              help="Remove the channels that structured pruning zeroed (smaller, faster "
                   "archive, same outputs); the report lists them per layer.")
@click.option("--weights", type=TableChoice("t2n.write.weight_formats:WEIGHT_FORMATS"), default="f32",
              show_default=True,
              help="How float weights are stored: as held (f32), float16 (f16, half the "
                   "size), or tract's 4-bit Q4_0 blocks for linear/matmul weights, "
                   "convolution filters and embedding tables (q4_0). --check then compares "
                   "with PyTorch on the same rounded weights and reports the error against "
                   "the original model.")
@click.option("--dtype", "compute", type=TableChoice("t2n.walk.compute_dtype:CHOICES"),
              default=None,
              help="What a bfloat16 model computes in (tract has no bf16): float32 (f32, "
                   "exact bf16 values) or float16 (f16). Required for bf16 models.")
@click.option("--target", default="tract", show_default=True,
              type=TableChoice("t2n.targets:TARGETS"),
              help="NNEF dialect: tract (tract_core ops, dynamic shapes) or khronos "
                   "(standard NNEF 1.0.5, checked with nnef-tools).")
@click.option("--capture", default=None,
              type=TableChoice("t2n.capture.strategies:CHOICES"),
              help="Front end: export (torch.export: data-dependent control flow is an "
                   "error instead of being frozen), trace (torch.jit.trace), or auto "
                   "(torch.export, else the trace, saying why). Default: torch.export for a "
                   "Python module; a TorchScript file is read as its own graph; a model "
                   "holding torch.ao's packed quantized weights is traced.")
@_EXTENSION_OPTION
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def export_cmd(model, output, inputs, check, keep_failed, no_load_check, dynamic, stream, pulse,
               output_names, int_range, constant_outputs, seed, rtol, atol, trust_pickle,
               compact, weights, compute, target, capture, extension_modules, quiet, as_json):
    """Export MODEL to an NNEF archive that tract runs.

    MODEL is a TorchScript file saved with torch.jit.save, or package.module:callable
    naming a function (or class) that returns an nn.Module, or (nn.Module, example_args)
    with example_args a tensor, a tuple of tensors or a dict of named tensors (its keys are
    the input names). The current directory is importable.

    Example inputs are random tensors made from the --input specs (one per forward()
    argument, in order); they are only needed for tracing and --check, the archive has the
    given shapes (except --dynamic axes).

    \b
    Examples:
      t2n export resnet.pt -o resnet.nnef.tar --input x:1x3x224x224:f32 --check
      t2n export mypkg.models:make_mlp -o mlp.nnef.tar --input x:8x64:f32 --dynamic x:0=B
      t2n export mypkg.lm:build -o lm.nnef.tar --input ids:1x16:i64 --input mask:1x16:i64 \
          --int-range ids=0:1000 --int-range mask=0:2
      t2n export mypkg.kws:build -o kws.nnef.tar --input x:1x40x64:f32 --dynamic x:2=S \
          --stream S --pulse 8 --check
    """
    from t2n import specs

    spec_list = [specs.parse_input_spec(s) for s in inputs]
    names = [s.name for s in spec_list]
    if len(set(names)) != len(names):
        raise UsageError(f"input names must be unique: {', '.join(names)}")
    lo_hi, per_input = specs.parse_int_ranges(int_range, names)
    if rtol < 0 or atol < 0:
        raise UsageError("--rtol and --atol must be >= 0")
    _check_output_path(output, keep_failed)
    _load_extensions(extension_modules)
    if spec_list:
        args = specs.make_inputs(spec_list, seed=seed, int_range=lo_hi, per_input=per_input)
        input_names = names
    else:
        args = None
        input_names = None
    module, example = specs.load_model(model, trust_pickle=trust_pickle)
    if args is None:
        if example is None:
            raise UsageError("give one --input NAME:DIMS:DTYPE per model input, e.g. "
                             "--input x:1x3x224x224:f32")
        args = example
    dyn_names = input_names or specs.example_names(args) or [f"input_{i}"
                                                             for i in range(len(args))]
    dynamic_axes = specs.dynamic_axes_from(dynamic, dyn_names)
    result = run_export(module, args, output, input_names=input_names,
                        output_names=list(output_names) or None, dynamic_axes=dynamic_axes,
                        check=check, rtol=rtol, atol=atol, quiet=quiet, as_json=as_json,
                        compact=compact, weights=weights, target=target, capture=capture,
                        **({"dtype": compute} if compute is not None else {}),
                        **({"constant_outputs": list(constant_outputs)} if constant_outputs
                           else {}),
                        **({"int_range": {n: per_input.get(n, lo_hi) for n in names},
                            "seed": seed} if spec_list else {}),
                        **({"keep_failed": keep_failed} if keep_failed else {}),
                        **({"verify_load": False} if no_load_check else {}),
                        **({"streaming": stream, "pulse": pulse}
                           if stream is not None or pulse is not None else {}))
    return EXIT_OK if result is not None else EXIT_CHECK_FAILED


def _check_output_path(output: str, keep_failed: str | None = None) -> None:
    """Fail before tracing (which can take minutes) when OUT (or --keep-failed PATH) cannot
    be written or holds what t2n may not replace (t2n.write.output_paths)."""
    from t2n.write.staging import check_destination

    check_destination(output, keep_failed)


def _load_extensions(modules) -> None:
    """Import the ``--extension`` modules (their ``t2n.mapping`` registrations)."""
    if modules:
        from t2n.extensions import load_modules

        load_modules(modules)


def run_export(module, args, output, *, quiet=False, as_json=False, **kwargs):
    """Export with warnings printed as ``t2n: warning:`` lines; prints the report.

    Returns the ExportResult, or None when the check failed (after reporting it)."""
    from t2n.api import export

    if quiet:  # silences the progress bar too
        kwargs["quiet"] = True
    result, failure = _run_reporting_warnings(lambda: export(module, args, output, **kwargs))
    if as_json:
        click.echo(json.dumps(result_dict(result), indent=2))
    elif not quiet or failure is not None:
        click.echo(result.report())
    if failure is not None:
        _err("t2n: check failed: tract's outputs differ from PyTorch's (see the report above)"
             + _not_written(output, failure))
        return None
    return result


def _not_written(output: str, failure) -> str:
    """The end of a failed check's line: OUT was left as it was, and where the archive went
    if ``--keep-failed`` kept it."""
    kept = getattr(failure, "kept_archive", None)
    return f"; {output} was not written" + (f", the archive is kept at {kept}" if kept else "")


def _run_reporting_warnings(run):
    """``run()``'s result and None, or a failed check's report and its error; the warnings
    raised meanwhile are printed once each as ``t2n: warning:`` lines."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result, failure = run(), None
        except CheckFailedError as e:
            if e.report is None:
                raise
            result, failure = e.report, e
    for w in _dedup(caught):
        _err(f"t2n: warning: {str(w.message).strip().splitlines()[0]}")
    return result, failure


def _dedup(caught):
    seen = set()
    for w in caught:
        key = str(w.message)
        if key in seen or issubclass(w.category, DeprecationWarning):
            continue
        seen.add(key)
        yield w


# ---------------------------------------------------------------------------- inspect
@cli.command("inspect")
@click.argument("archive", metavar="ARCHIVE")
@click.option("--set", "assignments", multiple=True, metavar="SYM=N",
              help="Value of a dynamic-axis symbol for the MAC count (default 1 each).")
@click.option("--no-macs", is_flag=True, help="Skip the MAC count (it loads the archive).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def inspect_cmd(archive, assignments, no_macs, as_json):
    """Describe an NNEF archive (t2n's or anyone's, tract or Khronos dialect).

    Prints the inputs and outputs, the op histogram, the parameter count and bytes per
    weight format (f32, f16, q4_0, ...), and the multiply-accumulate count: nnef-tools'
    counter for standard graphs, tract's own cost model for tract graphs.
    """
    from t2n.archive_info import inspect_archive

    symbols = {}
    for a in assignments:
        name, _, value = a.partition("=")
        if not name or not value.isdigit():
            raise UsageError(f"--set {a!r}: expected SYM=N with N a whole number")
        symbols[name] = int(value)
    info = inspect_archive(archive, symbols=symbols, macs=not no_macs)
    click.echo(json.dumps(info.as_dict(), indent=2) if as_json else info.report())
    return EXIT_OK


# ---------------------------------------------------------------------------- llm
@cli.command("llm")
@click.argument("model", metavar="MODEL")
@click.option("-o", "--output", "output", required=True, metavar="OUT",
              help="Archive to write: OUT.tgz (gzip tar), OUT.tar, or a folder (OUT.nnef, "
                   "no suffix, or any name ending in /). Only an NNEF archive at OUT is "
                   "replaced.")
@click.option("--weights", type=TableChoice("t2n.write.weight_formats:WEIGHT_FORMATS"), default="f32",
              show_default=True, help="How the archive stores the weights.")
@click.option("--check", is_flag=True,
              help="Generate greedily in tract and require transformers' generate() tokens "
                   "(exit 1 otherwise; OUT is then not written); prints tract's decode "
                   "tokens/s.")
@click.option("--keep-failed", "keep_failed", metavar="PATH", default=None,
              help="With --check: move the archive of a failed check to PATH, for inspection.")
@click.option("--max-length", "max_length", default=16, show_default=True,
              type=click.IntRange(1, None), metavar="N", help="New tokens --check generates.")
@click.option("--prompt", metavar="IDS",
              help="Token ids of the --check prompt, comma-separated (default: a fixed "
                   "8-token prompt).")
@click.option("--all-logits", "all_logits", is_flag=True,
              help="Return the logits of every position [1, S, V] (for scoring a text); "
                   "by default only the last position's [1, 1, V], all decoding reads.")
@click.option("--kv-cache", "kv_cache", type=click.Choice(["concat", "inplace"]),
              default="concat", show_default=True,
              help="inplace: tract keeps the key/value cache in its run State "
                   "(tract_transformers_dyn_kv_cache: keys and values leave the IO; a "
                   "hybrid's fixed-size states stay); concat: the "
                   "cache is passed in and returned as tensors.")
@click.option("--image-encoder", "image_encoder", metavar="PATH", default=None,
              help="Vision-language models (SmolVLM, Idefics3): where the image encoder's "
                   "archive goes (default: OUT with .vision before its suffix).")
@_EXTENSION_OPTION
@click.option("-q", "--quiet", is_flag=True, help="Print nothing on success.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def llm_cmd(model, output, weights, check, keep_failed, max_length, prompt, all_logits,
            kv_cache, image_encoder, extension_modules, quiet, as_json):
    """Export a causal language model to ONE archive for prefill and decoding.

    MODEL is a directory written by transformers' save_pretrained (config and weights; read
    from the local files only) or package.module:callable returning the model. The archive
    takes input_ids [1, S] and past_key_i / past_value_i [1, H_kv, P, D] per layer, and
    returns the last position's logits [1, 1, V] (--all-logits: [1, S, V]) and
    present_key_i / present_value_i [1, H_kv, P+S, D]; P is 0 for the prompt. With
    --kv-cache inplace tract keeps the keys and values in its State (not in the IO).
    A vision-language model also writes its image encoder (pixel_values [N, C, H, W] ->
    image_features [N*T, E]), and its step takes image_features [M, E] after input_ids.

    \b
    Examples:
      t2n llm ./my-llama -o llama.nnef.tgz --check
      t2n llm ./my-qwen3 -o qwen3.nnef.tar --weights q4_0 --check --max-length 32
    """
    from t2n import llm

    _check_output_path(output, keep_failed)
    _load_extensions(extension_modules)
    ids = None
    if prompt is not None:
        try:
            ids = [int(t) for t in prompt.split(",") if t.strip()]
        except ValueError:
            raise UsageError(f"--prompt {prompt!r}: give comma-separated token ids") from None
    result, failure = _run_reporting_warnings(lambda: llm.export_llm(
        model, output, weights=weights, check=check, max_new_tokens=max_length, prompt=ids,
        quiet=quiet, keep_failed=keep_failed, all_logits=all_logits, kv_cache=kv_cache,
        image_encoder=image_encoder))
    if as_json:
        click.echo(json.dumps(dict(result_dict(result.export), llm=result.llm_dict()),
                              indent=2))
    elif not quiet or failure is not None:
        click.echo(result.report())
    if failure is not None:
        _err("t2n: check failed: tract's tokens differ from transformers' (see the report)"
             + _not_written(output, failure))
        return EXIT_CHECK_FAILED
    return EXIT_OK


# ---------------------------------------------------------------------------- ops
@cli.command("ops")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def ops_cmd(as_json):
    """List the aten operators t2n converts (in-place variants such as add_ included)."""
    from t2n.walk.registry import mapping_module, supported_ops

    ops = supported_ops()
    rows = [{"name": n, "family": mapping_module(n).rsplit(".", 1)[-1]} for n in ops]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return EXIT_OK
    width = max((len(r["name"]) for r in rows), default=4)
    for r in rows:
        click.echo(f"{r['name']:<{width}}  {r['family']}")
    click.echo(f"{len(rows)} aten operators (and their in-place variants)")
    return EXIT_OK


# ---------------------------------------------------------------------------- check
@cli.command("check")
@click.argument("manifest", metavar="MANIFEST")
@click.option("-j", "--jobs", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Models converted in parallel (each in its own process).")
@click.option("--junit", "junit_path", metavar="FILE", help="Write a JUnit XML report.")
@click.option("--json", "json_path", metavar="FILE", help="Write a JSON report.")
@click.option("--only", multiple=True, metavar="NAME", help="Check only these models.")
@click.option("--keep", "keep_dir", metavar="DIR",
              help="Keep the exported archives in DIR (default: a temporary directory); "
                   "a failing model's as NAME.failed.nnef.tar.")
@click.option("--trust-pickle", is_flag=True,
              help="Allow pickled nn.Module files (runs code from them).")
def check_cmd(manifest, jobs, junit_path, json_path, only, keep_dir, trust_pickle):
    """Convert every model of MANIFEST, run it in tract and compare with PyTorch.

    MANIFEST is a TOML file with one [[model]] table per model:

    \b
      pythonpath = ["."]            # optional, relative to the manifest
      [[model]]
      name = "resnet18"
      model = "tests.fixtures.models:make_resnet18"   # or a TorchScript file
      inputs = ["x:1x3x224x224:f32"]            # or "pkg.mod:fn", or "inputs.npz"
      dynamic = ["x:0=B"]                       # optional
      rtol = 1e-4                               # optional, also atol, seed, int_range

    Each model runs in its own process, so a crash fails that model only. Prints a table;
    exit code 0 only when every model passes, 1 otherwise, 2 for a bad manifest.
    """
    from t2n.check import manifest_run as checkrun
    from t2n.check import manifest as manifest_mod

    entries = manifest_mod.load_manifest(manifest)
    if only:
        unknown = set(only) - {e.name for e in entries}
        if unknown:
            raise UsageError(f"--only names unknown model(s): {', '.join(sorted(unknown))}")
        entries = [e for e in entries if e.name in only]
    if keep_dir and not os.path.isdir(keep_dir):
        raise UsageError(f"--keep {keep_dir}: not a directory")
    checkrun.check_outputs(entries, keep_dir, junit_path, json_path)
    results = checkrun.run_all(entries, jobs=jobs, keep_dir=keep_dir,
                               trust_pickle=trust_pickle, progress=_err)
    click.echo(checkrun.format_table(results))
    if junit_path:
        checkrun.write_junit(results, junit_path)
    if json_path:
        checkrun.write_json(results, json_path)
    return EXIT_OK if all(r.status == "pass" for r in results) else EXIT_CHECK_FAILED


def main(argv=None) -> None:
    """Console-script entry point."""
    cli.main(args=argv, prog_name="t2n")


if __name__ == "__main__":
    main()
