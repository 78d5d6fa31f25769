"""``crew-service``: the local crew service from a shell (or ``python -m airflow_provider_crew.testing``)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from .crews import BUILTIN_CREWS_DIR, CrewDefinitionError, builtin_crew_names, load_crew
from .faults import ENDPOINTS, FaultRule
from .handle import DEFAULT_ORG_TOKEN, DEFAULT_USER_TOKEN
from .server import DEFAULT_CREWS

__all__ = ["build_parser", "faults_from_args", "main"]


def _endpoint_count(spec: str, default_endpoint: str = "*") -> tuple[str, int]:
    """``"kickoff:2"`` -> ("kickoff", 2); ``"kickoff"`` -> ("kickoff", 1); ``"2"`` -> ("*", 2)."""
    endpoint, _, count = spec.partition(":")
    if endpoint.isdigit() and not count:
        return default_endpoint, int(endpoint)
    return endpoint or default_endpoint, int(count) if count else 1


def _parse_fault(spec: str) -> dict[str, Any]:
    """A fault as JSON (``{"kind": "error", ...}``) or ``kind=error,status=429,count=2``."""
    spec = spec.strip()
    if spec.startswith("{"):
        parsed = json.loads(spec)
        if not isinstance(parsed, dict):
            raise ValueError("--fault JSON must be an object")
        return parsed
    data: dict[str, Any] = {}
    for item in spec.split(","):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--fault expects key=value pairs, got {item!r}")
        key = key.strip()
        value = value.strip()
        if key in ("kind", "endpoint", "crew", "location"):
            data[key] = value
        elif key in ("count", "status"):
            data[key] = None if value in ("", "none", "null") else int(value)
        elif key == "after":
            data[key] = _flag(value)
        else:
            data[key] = None if value in ("", "none", "null") else float(value)
    return data


def _flag(value: str) -> bool:
    """``after=true`` / ``after=false`` (also yes/no, 1/0) in the key=value form."""
    lowered = value.lower()
    if lowered in ("true", "yes", "1"):
        return True
    if lowered in ("false", "no", "0"):
        return False
    raise ValueError(f"--fault expects true or false, got {value!r}")


def _rule_fields(rule: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rule.items() if k not in ("id", "fired", "remaining")}


def faults_from_args(args: argparse.Namespace) -> list[FaultRule]:
    """Turn the fault flags into rules (raises ValueError with a readable message)."""
    rules: list[FaultRule] = []
    for spec in args.latency or []:
        endpoint, sep, seconds = spec.rpartition("=")
        rules.append(FaultRule("latency", endpoint if sep else "*", None, seconds=float(seconds)))
    for spec in args.rate_limit or []:
        endpoint, count = _endpoint_count(spec)
        rules.append(FaultRule("error", endpoint, count, status=429, retry_after=args.retry_after))
    for spec in args.unavailable or []:
        endpoint, count = _endpoint_count(spec)
        rules.append(FaultRule("error", endpoint, count, status=503, retry_after=args.retry_after))
    if args.status_404:
        rules.append(FaultRule("status_404", "status", args.status_404))
    for spec in args.drop_before or []:
        endpoint, count = _endpoint_count(spec)
        rules.append(FaultRule("drop_before", endpoint, count))
    for spec in args.drop_after or []:
        endpoint, count = _endpoint_count(spec)
        rules.append(FaultRule("drop_after", endpoint, count))
    for spec in args.html_500 or []:
        endpoint, count = _endpoint_count(spec)
        rules.append(FaultRule("html_500", endpoint, count))
    for spec in args.gateway_503 or []:
        endpoint, count = _endpoint_count(spec)
        rules.append(FaultRule("gateway", endpoint, count, status=503, after=True))
    for spec in args.no_healthy_upstream or []:
        endpoint, count = _endpoint_count(spec)
        rules.append(FaultRule("gateway", endpoint, count, status=503, after=False))
    if args.slow_first:
        rules.append(FaultRule("slow_first", "*", 1, seconds=args.slow_first))
    for spec in args.fault or []:
        rules.append(FaultRule.from_dict(_parse_fault(spec)))
    return rules


def _add_stop_endpoint_args(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--stop-endpoint",
        choices=("enabled", "absent", "405"),
        default="enabled",
        help="POST /stop/{kickoff_id}: enabled (default); absent: 404 as an unknown path; 405: "
        "method not allowed (an older or third-party service)",
    )
    serve.add_argument(
        "--no-stop-endpoint",
        dest="stop_endpoint",
        action="store_const",
        const="absent",
        help="same as --stop-endpoint absent",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crew-service",
        description="Local stand-in for a deployed crew HTTP service (for tests; state in memory).",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve crews over HTTP until interrupted")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8787, help="port; 0 picks a free one (default 8787)")
    serve.add_argument(
        "--crew",
        action="append",
        metavar="PATH|NAME",
        help=f"crew file (JSON/YAML) or built-in name; repeatable, first is at the root "
        f"(default: {', '.join(DEFAULT_CREWS)}; all built-in: {', '.join(builtin_crew_names())})",
    )
    serve.add_argument(
        "--status-path",
        choices=("contract", "deployed", "both"),
        default="both",
        help="contract: GET /{id}/status; deployed: GET /status/{id}; both (default)",
    )
    serve.add_argument("--org-token", default=DEFAULT_ORG_TOKEN, help="organization bearer token")
    serve.add_argument("--user-token", default=DEFAULT_USER_TOKEN, help="user bearer token")
    serve.add_argument("--speed", type=float, default=1.0, help="speed factor: 2 runs steps twice as fast")
    serve.add_argument("--webhook-timeout", type=float, default=5.0, help="seconds per webhook delivery")
    _add_stop_endpoint_args(serve)
    serve.add_argument("--ready-file", help="write {base_url, tokens, pid} as JSON here once serving")
    faults = serve.add_argument_group(
        "faults", f"ENDPOINT is one of {', '.join(ENDPOINTS)} or * (all); N is a count (default 1)"
    )
    faults.add_argument("--latency", action="append", metavar="[ENDPOINT=]SECONDS", help="delay requests")
    faults.add_argument("--rate-limit", action="append", metavar="[ENDPOINT:]N", help="N answers of 429")
    faults.add_argument("--unavailable", action="append", metavar="[ENDPOINT:]N", help="N answers of 503")
    faults.add_argument("--retry-after", type=float, default=1.0, help="Retry-After for 429/503 (default 1)")
    faults.add_argument("--status-404", type=int, metavar="N", help="404 on each execution's first N polls")
    faults.add_argument("--drop-before", action="append", metavar="ENDPOINT[:N]", help="reset, not acted on")
    faults.add_argument("--drop-after", action="append", metavar="ENDPOINT[:N]", help="act, then reset")
    faults.add_argument("--html-500", action="append", metavar="[ENDPOINT:]N", help="500 with an HTML body")
    faults.add_argument(
        "--gateway-503", action="append", metavar="ENDPOINT[:N]", help="act, then a gateway's own 503 (text)"
    )
    faults.add_argument(
        "--no-healthy-upstream", action="append", metavar="[ENDPOINT:]N", help="a gateway's 503, not acted on"
    )
    faults.add_argument("--slow-first", type=float, metavar="SECONDS", help="delay the first request")
    faults.add_argument(
        "--fault", action="append", metavar="SPEC", help='any rule: JSON or "kind=error,status=429,count=2"'
    )

    sub.add_parser("crews", help="list the built-in example crews")
    validate = sub.add_parser("validate", help="check crew files and print a summary")
    validate.add_argument("paths", nargs="+")
    return parser


def _banner(app: Any, base_url: str) -> str:
    conn = json.dumps({"conn_type": "crew", "host": base_url, "password": app.org_token})
    lines = [f"crew-service listening on {base_url}"]
    for name, crew in app.crews.items():
        where = "/ (root)" if name == app.root_crew else f"/crews/{name}"
        lines.append(f"  crew {name} at {where}; inputs: {', '.join(crew.input_names) or '(none)'}")
    styles = {"contract": "GET /{kickoff_id}/status", "deployed": "GET /status/{kickoff_id}"}
    shown = styles.values() if app.status_path == "both" else [styles[app.status_path]]
    lines += [
        f"  organization token: {app.org_token}",
        f"  user token: {app.user_token}",
        f"  status path: {app.status_path} ({' and '.join(shown)})",
        "  stop: "
        + {
            "enabled": "POST /stop/{kickoff_id}",
            "absent": "absent (POST /stop/{kickoff_id} answers 404 as an unknown path)",
            "405": "POST /stop/{kickoff_id} answers 405",
        }[app.stop_endpoint],
    ]
    for rule in app.faults.rules:
        lines.append(f"  fault #{rule['id']}: {FaultRule.from_dict(_rule_fields(rule)).describe()}")
    lines += [
        f"  control API: {base_url}/_control (organization token)",
        f"  Airflow connection: export AIRFLOW_CONN_CREW_DEFAULT={shlex.quote(conn)}",
        "State is kept in memory only. Press Ctrl+C to stop.",
    ]
    return "\n".join(lines)


def _serve(args: argparse.Namespace) -> int:
    from .server import build_app, serve_forever

    try:
        rules = faults_from_args(args)
        app = build_app(
            args.crew,
            org_token=args.org_token,
            user_token=args.user_token,
            status_path=args.status_path,
            speed=args.speed,
            faults=rules,
            webhook_timeout=args.webhook_timeout,
            stop_endpoint=args.stop_endpoint,
        )
    except (CrewDefinitionError, ValueError, TypeError) as exc:
        print(f"crew-service: {exc}", file=sys.stderr)
        return 2

    def announce(base_url: str) -> None:
        # The ready file first: whoever waits for the banner may read the file right after it.
        if args.ready_file:
            info = {
                "base_url": base_url,
                "org_token": app.org_token,
                "user_token": app.user_token,
                "pid": os.getpid(),
                "crews": list(app.crews),
            }
            tmp = args.ready_file + ".tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(info, fh)
            os.replace(tmp, args.ready_file)  # atomic: readers never see half a file
        print(_banner(app, base_url), flush=True)

    try:
        serve_forever(app, args.host, args.port, announce)
    except OSError as exc:
        print(f"crew-service: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # pragma: no cover - uvicorn normally handles SIGINT itself
        pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``crew-service`` console script."""
    args = build_parser().parse_args(argv)
    if args.command == "crews":
        for name in builtin_crew_names():
            crew = load_crew(name)
            print(f"{name}: {crew.description} (inputs: {', '.join(crew.input_names)})")
        print(f"files in {BUILTIN_CREWS_DIR}")
        return 0
    if args.command == "validate":
        status = 0
        for path in args.paths:
            try:
                crew = load_crew(path)
            except CrewDefinitionError as exc:
                print(f"{path}: INVALID: {exc}")
                status = 1
                continue
            tasks = ", ".join(
                t.name + (" [human input]" if t.human_input else "") + (" [endless]" if t.endless else "")
                for t in crew.tasks
            )
            print(f"{path}: ok: crew {crew.name}; inputs {crew.input_names}; tasks {tasks}")
        return status
    return _serve(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
