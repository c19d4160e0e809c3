"""``/ui``: the status page for people, rendered on the server from the ``/status`` document.

No front-end build and no script: one HTML page with the fleet per pool (states, $/h),
every node, the engine's last plan with each action's reason and what became of it, its
$/h preview, holds, placement choices and why, pending jobs no pool can run, launch
back-offs, the last reconcile run's findings, pools where LOST marking is frozen, errors
caught while acting, running operations, policy errors, pools whose data is missing, open
capacity requests, recent transitions, and links to the Grafana dashboards. A section with
nothing to show says so in one line.

Access is the API's token: a bearer header, or the login form, which sets an HttpOnly,
SameSite=Strict cookie holding a random session id (``sessions.py``: one per login, kept
server-side with an expiry, ended by logout; login and logout check Origin, failed logins
are throttled). Every value
shown is HTML-escaped; the page shows only what ``/status`` holds, which carries no
secret by construction (``status.py``), and never echoes a header or the form back.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from email.message import Message
from html import escape
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qs

from autoscaler.model.plan import Plan, subject_of, target_of
from autoscaler.service.http.sessions import LoginThrottle, Sessions, same_origin

COOKIE = "gpu_autoscaler_ui"
COOKIE_ATTRS = "Path=/ui; HttpOnly; SameSite=Strict"
TRANSITIONS = 20  # newest transitions shown (the page is a glance, /status has more)
MAX_FORM = 4096  # bytes of a login form read, at most
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    # same-origin, not no-referrer: under no-referrer a browser posts the login form with
    # "Origin: null", which the Origin check must refuse. Other sites still get nothing.
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}
HTML = "text/html; charset=utf-8"
STYLE = """body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d232b}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:3px 8px;
border-bottom:1px solid #dde2e8;vertical-align:top}th{background:#f2f4f7}
.num{text-align:right}.muted{color:#66707d}.bad{color:#b3261e}.warn{color:#8a5a00}
.state{display:inline-block;padding:0 6px;margin:1px;border-radius:8px;background:#e8ecf1}
.READY{background:#d7f0dc}.DRAINING,.DRAINED{background:#fbeecb}.INTERRUPTED{background:#f1dcf5}
.PROVISION_FAILED,.BOOTSTRAP_FAILED,.LOST,.TERMINATING{background:#f8d8d6}
nav a{margin-right:1em}form{max-width:22em}input{width:100%;padding:4px;margin:4px 0}"""


@dataclass(frozen=True)
class Page:
    code: int
    body: bytes
    ctype: str = HTML
    headers: dict[str, str] = field(default_factory=dict)


def authorized(headers: Mapping[str, str] | Message[str, str], token: str | None,
               sessions: Sessions) -> bool:
    if token is None:
        return True
    scheme, _, value = headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode()):
        return True
    session = _cookie(headers)
    return session is not None and sessions.valid(session)


def _cookie(headers: Mapping[str, str] | Message[str, str]) -> str | None:
    try:
        morsel = SimpleCookie(headers.get("Cookie", "")).get(COOKIE)
    except CookieError:
        return None
    return morsel.value if morsel is not None and morsel.value else None


def e(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def _doc(title: str, body: str) -> bytes:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
            f'<meta name="viewport" content="width=device-width"><style>{STYLE}</style></head>'
            f"<body>{body}</body></html>").encode()


def _page(code: int, title: str, body: str, headers: dict[str, str] | None = None) -> Page:
    return Page(code, _doc(title, body), headers={**SECURITY_HEADERS, **(headers or {})})


def login_page(message: str = "", code: int = 200) -> Page:
    note = f'<p class="bad">{e(message)}</p>' if message else ""
    return _page(code, "gpu-autoscaler: sign in", (
        "<h1>gpu-autoscaler</h1><p>The status page needs the service's API token.</p>"
        f'{note}<form method="post" action="/ui/login"><label for="token">Token</label>'
        '<input id="token" name="token" type="password" autocomplete="current-password" required>'
        '<button type="submit">Sign in</button></form>'))


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], empty: str,
           numeric: Sequence[int] = ()) -> str:
    """``rows`` cells are already-escaped HTML."""
    rows = list(rows)
    if not rows:
        return f'<p class="muted">{e(empty)}</p>'
    th = "".join(f"<th>{e(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
                                   for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def _states(states: Mapping[str, int]) -> str:
    return " ".join(f'<span class="state {e(s)}">{e(s)} {e(n)}</span>' for s, n in states.items())


def _pools(status: Mapping[str, Any], plan: Plan | None) -> str:
    fleet = status.get("fleet") or {}
    pools = fleet.get("pools") or {}
    summaries = plan.pools if plan is not None else {}
    missing = status.get("data_missing") or {}
    rows = []
    for key in sorted(set(pools) | set(summaries)):
        p = pools.get(key) or {"nodes": 0, "hourly_usd": 0, "states": {}}
        s = summaries.get(key)
        util = f"{s.util_mean:.0f}%" if s is not None and s.util_mean is not None else "–"
        pending = f"{s.pending_gpus:g}" if s is not None else "–"
        data = f'<span class="bad">{e(missing[key])}</span>' if key in missing else "ok"
        hourly = f"{p['hourly_usd']:.2f}"
        if p.get("warm_hourly_usd"):  # stopped warm nodes bill their volumes only
            hourly += f" (warm, stopped: {p['warm_hourly_usd']:.3f})"
        rows.append([e(key), e(p["nodes"]), _states(p.get("states") or {}),
                     e(hourly), e(util), e(pending), data])
    return _table(["pool", "nodes", "states", "$/h", "GPU util", "pending GPUs", "data"], rows,
                  "No pools yet.", numeric=(1, 3, 4, 5))


def _nodes(status: Mapping[str, Any]) -> str:
    nodes = (status.get("fleet") or {}).get("nodes") or []
    rows = [[e(n["name"]), e(n["pool"]), e(n["instance_type"]), e(n["market"]),
             f'<span class="state {e(n["state"])}">{e(n["state"])}</span>', e(n.get("since")),
             e(f"{n['hourly_usd']:.2f}"), e(n.get("reason"))] for n in nodes]
    return _table(["node", "pool", "type", "market", "state", "since", "$/h", "reason"], rows,
                  "No nodes.", numeric=(6,))


def _requests(status: Mapping[str, Any]) -> str:
    rows = [[e(r.get("request")), e(r.get("condition")), e(r.get("reason")),
             e(", ".join(r.get("nodes") or [])), e(r.get("updated_at"))]
            for r in status.get("requests") or []]
    return _table(["request", "condition", "reason", "nodes", "updated"], rows, "None open.")


def _forecasts(status: Mapping[str, Any]) -> str:
    """Predictive pools (service/observe/forecasts.py): the forecast next to the actual demand."""
    def gpus(v: Any) -> str:
        return "–" if v is None else f"{v:g}"

    rows = []
    for key, f in sorted((status.get("forecasts") or {}).items()):
        mape = f.get("rolling_mape")
        rows.append([e(key), e(f.get("mode")), e(gpus(f.get("p50_gpus"))),
                     e(gpus(f.get("quantile_gpus"))), e(gpus(f.get("actual_gpus"))),
                     e(f.get("model") or "–"), e("–" if mape is None else f"{mape:.0f}%"),
                     e("held" if f.get("applied") else "not held"),
                     e(f.get("floor_reason") or f.get("note") or "")])
    return _table(["pool", "mode", "p50", "policy quantile", "actual", "model", "MAPE 7 d",
                   "floor", "reason"], rows, "No pool has predictive capacity on.",
                  numeric=(2, 3, 4, 6))


def _spot_scores(status: Mapping[str, Any]) -> str:
    rows = [[e(f"{r.get('cloud')} {r.get('region')}"), e(r.get("zone")),
             e(", ".join(r.get("instance_types") or [])), e(f"{r.get('score')}/10"),
             e("low: tried after every other offer" if r.get("low") else "")]
            for r in status.get("spot_scores") or []]
    return _table(["region", "zone", "instance types", "score", "effect"], rows,
                  "None read (clouds.aws.spot_placement_scores is off, or no AWS pool lists "
                  "zones and three or more instance types).", numeric=(3,))


def _transitions(status: Mapping[str, Any]) -> str:
    rows = [[e(t.get("at")), e(t.get("node")), e(t.get("from")), e(t.get("to")), e(t.get("reason"))]
            for t in reversed((status.get("transitions") or [])[-TRANSITIONS:])]
    return _table(["at", "node", "from", "to", "reason"], rows, "None yet.")


def _plan(last: Mapping[str, Any] | None, plan: Plan | None) -> tuple[str, str]:
    """The last plan's actions (holds apart) with what the executor did with each."""
    if last is None or plan is None:
        return '<p class="muted">No plan decided yet.</p>', '<p class="muted">No holds.</p>'
    done = {(s["kind"], s["pool"], s.get("node")): f"{s['status']} {s.get('detail') or ''}".strip()
            for s in last.get("action_status") or []}
    acts, holds = [], []
    for a in plan.actions:
        if a.kind == "hold":
            holds.append([e(a.pool), e(target_of(a)), e(a.reason)])
            continue
        status = done.get((a.kind, a.pool, subject_of(a).node), "")
        acts.append([e(a.kind), e(a.pool), e(target_of(a)), e(a.reason), e(status)])
    mode = " (dry run)" if last.get("dry_run") else ""
    head = (f'<p>Plan {e(last.get("id"))}{e(mode)}, decided {e(last.get("decided_at"))}: '
            f'{e(last.get("changes"))} change(s).</p>')
    return (head + _table(["action", "pool", "what", "reason", "status"], acts, "No changes."),
            _table(["pool", "held", "reason"], holds, "No holds."))


def _placements(plan: Plan | None) -> str:
    rows = [[e(c.job), e(c.pool), "<br>".join(e(x) for x in c.compared), e(c.reason)]
            for c in (plan.placements if plan else [])]
    return _table(["job", "pool chosen", "pools compared", "why"], rows,
                  "No pending job had a choice between pools.")


def _unserved(plan: Plan | None) -> str:
    rows = [[e(j.id), e(j.team), e(j.constraint), e(j.reason)]
            for j in (plan.unserved if plan else [])]
    return _table(["job", "team", "first failed constraint", "why no pool runs it"], rows,
                  "Every pending job has a pool whose nodes can run it.")


def _lines(lines: Iterable[Any], empty: str) -> str:
    items = "".join(f"<li>{e(x)}</li>" for x in lines)
    return f"<ul>{items}</ul>" if items else f'<p class="muted">{e(empty)}</p>'


def _reconciled(loop: Mapping[str, Any]) -> str:
    """Which run the findings are from, and why the last one found nothing new."""
    at = loop.get("reconciled_at")
    when = f"From the run at {e(at)}." if at else "No run has ended yet."
    failed = loop.get("reconcile_error")
    if failed:
        return (f'<p class="bad">The last run failed: {e(failed)}. {when} '
                "Its findings may no longer be true.</p>")
    return f'<p class="muted">{when}</p>'


def _acting(status: Mapping[str, Any]) -> str:
    """What the loop met while acting: its reconcile findings, LOST freezes, errors, work."""
    loop = status.get("loop") or {}
    frozen = [[e(k), e(v)] for k, v in sorted((status.get("lost_frozen") or {}).items())]
    counts = loop.get("step_errors") or {}
    errors = ('<p class="muted">None since the service started.</p>' if not counts else
              "<p>Since the service started: "
              + ", ".join(f"{e(k)} {e(v)}" for k, v in counts.items()) + ". The last ones:</p>"
              + _lines(loop.get("recent_errors") or [], "None kept."))
    return ("<h2>Launch back-offs</h2>"
            + _lines(loop.get("launch_backoffs") or [], "No launch is backed off.")
            + "<h2>Reconciler findings</h2>" + _reconciled(loop)
            + _lines(loop.get("reconcile_findings") or [], "None.")
            + "<h2>LOST marking frozen</h2>"
            + _table(["pool", "why"], frozen, "No pool: missing instances are marked LOST.")
            + "<h2>Errors caught while acting</h2>" + errors
            + "<h2>Running operations</h2>"
            + _lines(loop.get("operations") or [], "None."))


def _header(status: Mapping[str, Any], links: Sequence[tuple[str, str]]) -> str:
    loop = status.get("loop") or {}
    fleet = status.get("fleet") or {}
    leader = status.get("leader") or {}
    err = loop.get("last_error")
    error = (f'<p class="bad">Last tick failed in {e(loop.get("last_error_stage"))}: {e(err)}</p>'
             if err else "")
    nav = "".join(f'<a href="{e(url)}" rel="noopener noreferrer">{e(title)}</a>' for title, url in links)
    role = "leader" if leader.get("is_leader") else "follower"
    hourly = f"{fleet.get('hourly_usd', 0):.2f}"
    return (f"<h1>gpu-autoscaler</h1><p>{e(len(fleet.get('nodes') or []))} node(s), "
            f"<b>${e(hourly)}/h</b> · {e(loop.get('ticks'))} ticks, "
            f"last {e(loop.get('last_tick_at'))} ({e(loop.get('last_duration_s'))}s) · {e(role)}"
            f"{' · dry run' if loop.get('dry_run') else ''} · now {e(status.get('now'))}</p>"
            f"{error}<nav>{nav or '<span class=muted>No dashboards configured (http.grafana_url).</span>'}"
            '</nav><form method="post" action="/ui/logout" style="max-width:none">'
            '<button type="submit">Sign out</button></form>')


def status_page(status: Mapping[str, Any], links: Sequence[tuple[str, str]] = ()) -> Page:
    last = status.get("last_plan")
    plan = Plan.model_validate(last["plan"]) if last else None
    actions, holds = _plan(last, plan)
    errors = [[e(x)] for x in status.get("policy_errors") or []]
    missing = [[e(k), e(v)] for k, v in sorted((status.get("data_missing") or {}).items())]
    sources = status.get("sources_missing") or []
    body = (_header(status, links) + "<h2>Fleet per pool</h2>" + _pools(status, plan)
            + "<h2>Last plan</h2>" + actions
            + "<h2>Preview of the last plan ($/h)</h2>"
            + _lines((status.get("loop") or {}).get("previews") or [], "Nothing to preview.")
            + "<h2>Holds</h2>" + holds
            + "<h2>Placement groups: where pending jobs launch</h2>" + _placements(plan)
            + "<h2>Pending jobs no pool can run (not bought for)</h2>" + _unserved(plan)
            + _acting(status)
            + "<h2>Spot placement scores (AWS)</h2>" + _spot_scores(status)
            + "<h2>Policy errors</h2>" + _table(["error (the team keeps its last good policy)"],
                                                errors, "None.")
            + "<h2>Data missing (scale-down frozen)</h2>"
            + _table(["pool", "why"], missing, "No pool is missing data.")
            + (f'<p class="warn">Sources unreadable: {e(", ".join(sources))}</p>' if sources else "")
            + "<h2>Forecasts (predictive capacity)</h2>" + _forecasts(status)
            + "<h2>Open capacity requests</h2>" + _requests(status)
            + "<h2>Nodes</h2>" + _nodes(status)
            + "<h2>Recent transitions</h2>" + _transitions(status))
    return _page(200, "gpu-autoscaler: status", body)


def dashboard_links(grafana_url: str | None, dashboards: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """(title, url) per dashboard (uid, title) under the configured Grafana, if any."""
    if not grafana_url:
        return []
    base = grafana_url.rstrip("/")
    return [(title, f"{base}/d/{uid}") for uid, title in dashboards]


def get(headers: Mapping[str, str] | Message[str, str], token: str | None, sessions: Sessions,
        status: Callable[[], Mapping[str, Any]], links: Sequence[tuple[str, str]]) -> Page:
    if not authorized(headers, token, sessions):
        return login_page(code=401)
    return status_page(status(), links)


def _see_ui(cookie: str | None = None) -> Page:
    headers = {**SECURITY_HEADERS, "Location": "/ui"}
    if cookie is not None:
        headers["Set-Cookie"] = cookie
    return Page(303, b"", "text/plain", headers)


def login(form: bytes, headers: Mapping[str, str] | Message[str, str], client: str,
          token: str | None, sessions: Sessions, throttle: LoginThrottle) -> Page:
    """``POST /ui/login`` (form field ``token``): a new session in the cookie."""
    if not same_origin(headers):
        return login_page("Sign in from this server's own page (the Origin did not match).",
                          code=403)
    wait = throttle.wait(client)
    if wait > 0:
        page = login_page(f"Too many failed sign-ins: try again in {wait:.0f} s.", code=429)
        return Page(page.code, page.body, page.ctype, {**page.headers,
                                                         "Retry-After": f"{max(1, round(wait))}"})
    if token is None:
        return _see_ui()
    try:
        fields = parse_qs(form.decode("utf-8", "replace"), max_num_fields=8)
    except ValueError:  # more fields than a sign-in form has; no token was tried
        return login_page("Sign in with this server's own form (too many form fields).", code=400)
    given = (fields.get("token") or [""])[0]
    if not hmac.compare_digest(given.encode(), token.encode()):
        throttle.failed(client)
        return login_page("That token is not the one the service was given.", code=401)
    throttle.succeeded(client)
    return _see_ui(f"{COOKIE}={sessions.open()}; {COOKIE_ATTRS}; Max-Age={int(sessions.ttl)}")


def logout(headers: Mapping[str, str] | Message[str, str], sessions: Sessions) -> Page:
    """``POST /ui/logout``: the session ends here, not only in the browser."""
    if not same_origin(headers):
        return login_page("Sign out from this server's own page (the Origin did not match).",
                          code=403)
    session = _cookie(headers)
    if session is not None:
        sessions.close(session)
    return _see_ui(f"{COOKIE}=; {COOKIE_ATTRS}; Max-Age=0")
