"""`scaling-book eval`, `transfer-check` and `resume`: the commands that call a model.

`eval` and `transfer-check` take the same sampling and limit options with the same defaults. Before
the first rollout one cheap request checks the endpoint (exit 3 in seconds on a refused connection,
a rejected key or an unknown model). Ctrl-C or SIGTERM stops a run: finished rollouts are stored,
the run is marked interrupted, and the command exits 130 naming `scaling-book resume RUN`.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Annotated, Optional

import typer

from scaling_book.cli.app import (
    EXIT_EVAL_FAILED,
    EXIT_INTERRUPTED,
    EXIT_MISSING,
    EXIT_USAGE,
    DbOption,
    ExportOption,
    app,
    check_config,
    check_endpoint,
    console,
    err,
)
from scaling_book.cli.render import print_transfer_check
from scaling_book.paths import export_dir
from scaling_book.runs.runner import DEFAULT_REQUEST_TIMEOUT_S

TemperatureOption = Annotated[Optional[float], typer.Option("--temperature", min=0.0, help="Sampling temperature sent with every request (server default when unset).")]
TopPOption = Annotated[Optional[float], typer.Option("--top-p", min=0.0, max=1.0, help="Nucleus sampling top_p sent with every request.")]
MaxTokensOption = Annotated[Optional[int], typer.Option("--max-tokens", min=1, help="Reply token limit; a reply cut there is stored as truncated and scores 0.")]
SeedOption = Annotated[Optional[int], typer.Option("--seed", help="Sampling seed sent to the endpoint with every request.")]
LimitOption = Annotated[Optional[int], typer.Option("--limit", min=0, help="Only the first N items of each config, by id.")]
TimeoutOption = Annotated[float, typer.Option("--request-timeout", min=0.001, help="Seconds a model request may take before the rollout fails.")]
UnisolatedOption = Annotated[bool, typer.Option("--allow-unisolated-code", help="Run code submissions even without isolation (no working bwrap): NOT a sandbox.")]
PromptModeOption = Annotated[str, typer.Option("--system-prompt-mode", help="system: instructions as a system message; user: folded into the user message (for models that reject system messages).")]
ConcurrencyOption = Annotated[int, typer.Option("--max-concurrent", min=1, help="Rollouts in flight at once.")]


def _request(*, model, base_url, api_key_var, config, rollouts, checkpoint, step, max_concurrent, export_from,
             temperature, top_p, max_tokens, seed, limit, request_timeout, system_prompt_mode,
             allow_unisolated_code=False):
    from scaling_book.runs.runner import EvalRequest

    if system_prompt_mode not in ("system", "user"):
        err.print(f"[bold red]--system-prompt-mode must be system or user, not {system_prompt_mode!r}[/bold red]")
        raise typer.Exit(EXIT_USAGE)
    if limit == 0:
        err.print("[bold red]--limit 0 selects no items; nothing to evaluate[/bold red]")
        raise typer.Exit(EXIT_USAGE)
    sampling = {key: value for key, value in (("temperature", temperature), ("top_p", top_p),
                                              ("max_tokens", max_tokens), ("seed", seed)) if value is not None}
    return EvalRequest(model=model, base_url=base_url, api_key_var=api_key_var, config=config,
                       rollouts_per_item=rollouts, checkpoint=checkpoint, step=step, max_concurrent=max_concurrent,
                       export_dir=export_dir(export_from), sampling=sampling, limit=limit,
                       request_timeout=request_timeout, system_prompt_mode=system_prompt_mode,
                       allow_unisolated_code=allow_unisolated_code)


def preflight(base_url: str, api_key_var: str, model: str, request_timeout: float) -> None:
    """Exit 3 with one line when the endpoint is unreachable, refuses the key or does not serve `model`."""
    from scaling_book.runs.preflight import (
        PREFLIGHT_TIMEOUT_S,
        EndpointError,
        check_endpoint_serves,
    )

    started = time.monotonic()
    try:
        check_endpoint_serves(base_url, api_key_var, model, timeout_s=min(PREFLIGHT_TIMEOUT_S, request_timeout))
    except EndpointError as exc:
        err.print(f"[bold red]endpoint check failed:[/bold red] {exc} ({time.monotonic() - started:.1f} s)",
                  highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_EVAL_FAILED) from None


def _interrupted(run_id: int, what: str = "run") -> None:
    err.print(f"[bold yellow]{what} {run_id} interrupted[/bold yellow]: finished rollouts are stored; resume "
              f"with `scaling-book resume {run_id}`", highlight=False)
    raise typer.Exit(EXIT_INTERRUPTED)


def _run_eval(request, db, resume_run_id=None) -> None:
    from scaling_book.runs.runner import EmptySelection, MissingExport, run_and_record

    try:
        summary = run_and_record(request, db_url=db, console=err, resume_run_id=resume_run_id)
    except MissingExport as exc:
        err.print(f"[bold red]{exc}[/bold red]")
        raise typer.Exit(EXIT_MISSING) from None
    except EmptySelection as exc:
        err.print(f"[bold red]{exc}[/bold red]")
        raise typer.Exit(EXIT_USAGE) from None
    console.print(summary.table())
    if summary.status == "interrupted":
        _interrupted(summary.run_id)
    if summary.status != "complete":
        err.print(f"[bold red]run {summary.run_id} failed:[/bold red] {summary.error}", highlight=False)
        raise typer.Exit(EXIT_EVAL_FAILED)
    console.print(f"run {summary.run_id} complete: {summary.n_rollouts} rollouts ({summary.truncated} truncated) "
                  f"in {summary.seconds:.1f} s")


def _run_check(request, db, resume_check_id=None, variants: int = 0) -> None:
    from scaling_book.runs.resume import ResumeRefused
    from scaling_book.runs.runner import EmptySelection, MissingExport
    from scaling_book.runs.transfer_check import run_transfer_check

    started = time.perf_counter()
    try:
        result = run_transfer_check(request, db_url=db, console=err, variants=variants,
                                    resume_check_id=resume_check_id)
    except MissingExport as exc:
        err.print(f"[bold red]{exc}[/bold red]")
        raise typer.Exit(EXIT_MISSING) from None
    except EmptySelection as exc:
        err.print(f"[bold red]{exc}[/bold red]")
        raise typer.Exit(EXIT_USAGE) from None
    except ResumeRefused as exc:
        err.print(f"[bold red]cannot resume:[/bold red] {exc}")
        raise typer.Exit(EXIT_MISSING) from None
    if result.status == "interrupted":
        stopped = next(run for run in result.runs.values() if run.status == "interrupted")
        err.print(f"transfer check {result.transfer_check_id}: {result.error}", highlight=False)
        _interrupted(stopped.run_id)
    if result.status != "complete":
        err.print(f"[bold red]transfer check {result.transfer_check_id} failed:[/bold red] {result.error}",
                  highlight=False)
        raise typer.Exit(EXIT_EVAL_FAILED)
    print_transfer_check(console, result, request.model, request.checkpoint, request.step)
    console.print(f"took {time.perf_counter() - started:.1f} s")


@app.command("eval")
def eval_command(
    model: Annotated[str, typer.Option("--model", "-m", help="Model name sent to the endpoint.")],
    base_url: Annotated[str, typer.Option("--base-url", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")],
    api_key_var: Annotated[str, typer.Option("--api-key-var", help="Name of the environment variable holding the API key.")] = "OPENAI_API_KEY",
    config: Annotated[str, typer.Option("--config", help="Config to evaluate: qa, code, train, heldout_qa, heldout_code, heldout, all, train_variants, heldout_variants.")] = "train",
    rollouts: Annotated[int, typer.Option("--rollouts", "-r", min=1, help="Rollouts per item.")] = 1,
    checkpoint: Annotated[Optional[str], typer.Option("--checkpoint", help="Checkpoint label stored with the run.")] = None,
    step: Annotated[Optional[int], typer.Option("--step", help="Training step stored with the run.")] = None,
    max_concurrent: ConcurrencyOption = 8,
    temperature: TemperatureOption = None,
    top_p: TopPOption = None,
    max_tokens: MaxTokensOption = None,
    seed: SeedOption = None,
    limit: LimitOption = None,
    request_timeout: TimeoutOption = DEFAULT_REQUEST_TIMEOUT_S,
    system_prompt_mode: PromptModeOption = "system",
    allow_unisolated_code: UnisolatedOption = False,
    db: DbOption = None,
    export_from: ExportOption = None,
) -> None:
    """Evaluate a model on one config through the verifiers taskset and store the run.

    Each rollout's rewards, metrics, visible reply, reasoning and grader reason are stored as it
    finishes. A run in which any rollout errored is stored as failed and the command exits 3; an
    interrupted run exits 130 and `scaling-book resume RUN` finishes it.
    """
    check_config(config)
    check_endpoint(base_url, api_key_var)
    request = _request(model=model, base_url=base_url, api_key_var=api_key_var, config=config, rollouts=rollouts,
                       checkpoint=checkpoint, step=step, max_concurrent=max_concurrent, export_from=export_from,
                       temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed, limit=limit,
                       request_timeout=request_timeout, system_prompt_mode=system_prompt_mode,
                       allow_unisolated_code=allow_unisolated_code)
    preflight(base_url, api_key_var, model, request_timeout)
    _run_eval(request, db)


@app.command("transfer-check")
def transfer_check_command(
    model: Annotated[str, typer.Option("--model", "-m", help="Model name sent to the endpoint.")],
    base_url: Annotated[str, typer.Option("--base-url", help="OpenAI-compatible base URL.")],
    api_key_var: Annotated[str, typer.Option("--api-key-var", help="Environment variable holding the API key.")] = "OPENAI_API_KEY",
    rollouts: Annotated[int, typer.Option("--rollouts", "-r", min=1, help="Rollouts per item.")] = 4,
    checkpoint: Annotated[Optional[str], typer.Option("--checkpoint", help="Checkpoint label.")] = None,
    step: Annotated[Optional[int], typer.Option("--step", help="Training step of the checkpoint.")] = None,
    max_concurrent: ConcurrencyOption = 8,
    temperature: TemperatureOption = None,
    top_p: TopPOption = None,
    max_tokens: MaxTokensOption = None,
    seed: SeedOption = None,
    limit: LimitOption = None,
    request_timeout: TimeoutOption = DEFAULT_REQUEST_TIMEOUT_S,
    system_prompt_mode: PromptModeOption = "system",
    allow_unisolated_code: UnisolatedOption = False,
    variants: Annotated[int, typer.Option("--variants", min=0, help="Also evaluate K counterfactual variants of "
                                          "every parametric train item and report the memorisation gap.")] = 0,
    db: DbOption = None,
    export_from: ExportOption = None,
) -> None:
    """Evaluate train and heldout, store both runs under one transfer check, print the gap.

    Prints each half's exact accuracy (items, rollouts, truncated, 95% interval), the gap in points, a
    per-grader table and the matched-grader gap (held-out reweighted to the train grader mix). A check
    in which any rollout failed is stored as failed (exit 3) and stays out of the history views; an
    interrupted one exits 130 and `scaling-book resume RUN` finishes every half.

    With --variants K, a third run evaluates the first K exported variants (config train_variants) of
    every parametric train item, and the memorisation gap (original minus variant accuracy over those
    items, paired 95% interval) is stored on the check and printed beside the train/held-out gap.
    """
    check_endpoint(base_url, api_key_var)
    request = _request(model=model, base_url=base_url, api_key_var=api_key_var, config="train", rollouts=rollouts,
                       checkpoint=checkpoint, step=step, max_concurrent=max_concurrent, export_from=export_from,
                       temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed, limit=limit,
                       request_timeout=request_timeout, system_prompt_mode=system_prompt_mode,
                       allow_unisolated_code=allow_unisolated_code)
    preflight(base_url, api_key_var, model, request_timeout)
    _run_check(request, db, variants=variants)


@app.command()
def resume(
    run: Annotated[int, typer.Argument(help="Id of the interrupted run (a transfer check's run resumes the check).")],
    base_url: Annotated[Optional[str], typer.Option("--base-url", help="Endpoint to use instead of the stored one.")] = None,
    api_key_var: Annotated[Optional[str], typer.Option("--api-key-var", help="Key variable instead of the stored one.")] = None,
    max_concurrent: ConcurrencyOption = 8,
    allow_unisolated_code: UnisolatedOption = False,
    db: DbOption = None,
    export_from: ExportOption = None,
) -> None:
    """Finish an interrupted (or dead running) run: only its missing (item, rollout) pairs run, with its
    stored sampling arguments; refused when the export changed since. A transfer check resumes every half it
    had (train, heldout and, after `--variants K`, its K variants)."""
    from scaling_book.cli.app import require_store
    from scaling_book.runs.resume import ResumeRefused, request_for, resumable
    from scaling_book.runs.runner import MissingExport
    from scaling_book.store import make_engine, make_session_factory, upgrade_to_head
    from scaling_book.store.tracking import EvalRun

    require_store(db)
    upgrade_to_head(db)
    engine = make_engine(db)
    try:
        with make_session_factory(engine)() as session:
            stored = session.get(EvalRun, run)
            if stored is not None and stored.transfer_check_id is not None and stored.status == "complete":
                target = stored   # the check's other half is the one to resume
            else:
                target = resumable(stored, run)
            request = request_for(target, export_dir(export_from), base_url=base_url, api_key_var=api_key_var,
                                  max_concurrent=max_concurrent)
            check_id = target.transfer_check_id
    except (ResumeRefused, MissingExport) as exc:
        err.print(f"[bold red]cannot resume:[/bold red] {exc}")
        raise typer.Exit(EXIT_MISSING) from None
    finally:
        engine.dispose()
    check_endpoint(request.base_url, request.api_key_var)
    preflight(request.base_url, request.api_key_var, request.model, request.request_timeout)
    if check_id is not None:
        _run_check(replace(request, config="train", allow_unisolated_code=allow_unisolated_code), db,
                   resume_check_id=check_id)
    else:
        _run_eval(replace(request, allow_unisolated_code=allow_unisolated_code), db, resume_run_id=run)
