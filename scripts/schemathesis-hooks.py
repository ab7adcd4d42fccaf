"""Schemathesis hooks for scripts/test-api.

docs/openapi.yaml states a few rules in words that JSON Schema cannot
express, because they relate two fields or count something a schema does not
see. These hooks teach the generator those rules, and nothing else:

- a rules-based request names a domain the server has rules for: the sample
  rules (examples/rules) define only `api`, so a generated domain becomes
  `api` (any other answers `400 unknown_domain`, as documented);
- a stepped window's `step` is between 1 ms and the window (the rate's
  period, or `interval` seconds for the Databox routes);
- a rate's period is at most 2^62 ns;
- a key or Databox id is at most 1,024 bytes of UTF-8 (the schema's
  `maxLength` counts characters);
- a check's, reservation's or peek's `cost` is at most the limit's capacity (its `burst`, or
  the `N` of its rate; 5 for the sample rules, their smallest);
- an inline limit's calendar `timezone` is a name of the IANA time zone
  database (the schema says "a string"; a generated one becomes one of a
  few real zones, any other answers `400 invalid_limit`, as documented);
- on the Envoy JSON route, for a domain the sample rules define, a
  descriptor's hits are at most its limit's capacity (a request-side
  override's `requests_per_unit`, else the domain's smallest limit): more is
  `400 cost_too_large` (SPEC §2: a cost that can never fit is an error, not
  an eternal 429);
- `/v1/overrides/{domain}` names the sample domain, and a generated
  override (a valid one; an invalid one is sent as it is) is mended into
  one the rules accept (each option only on its algorithm, a count of at
  least the sample rules' smallest capacity, so the checks generated after
  it still fit: a request whose descriptor an override covers is decided by
  it); mended, not dropped, because few generated limits fit as they are
  and a generator that drops most of its cases gives up; a listing's cursor
  is one the server gave (none: generated ones are not).

- a check with `"settle": true` has an estimated `cost` of at least 1
  and no inline `concurrency` limit (a lease is released, not settled):
  either is `400 invalid_request`, as documented;

- a JSON body is at most the server's body cap (64 KiB, `--max-body-bytes`'s
  default): a larger one is answered `413 body_too_large` before it is read
  as JSON, which is SPEC §5's answer but not one schemathesis expects for a
  body that breaks the schema (a generated list over its `maxItems` can
  pass 64 KiB).

A generated request that breaks one of these is dropped, not sent: the
server's refusal of each is covered by the Rust tests.
"""

import json
import re

import schemathesis
from schemathesis.core.parameters import ParameterLocation

SAMPLE_DOMAIN = "api"
# Real IANA zone names for generated calendar limits (DST, half-hour
# offsets and a 30-minute DST change among them).
SAMPLE_ZONES = ["UTC", "Europe/London", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]
SAMPLE_SMALLEST_CAPACITY = 5
# The domains of examples/rules and the smallest capacity of each file's
# limits (api.yaml; bench-grpc.yaml, scripts/bench-grpc's rules).
SAMPLE_DOMAIN_CAPACITY = {SAMPLE_DOMAIN: SAMPLE_SMALLEST_CAPACITY, "bench": 1_000_000}
MAX_KEY_BYTES = 1024
MAX_BODY_BYTES = 64 * 1024
MAX_PERIOD_NS = 1 << 62
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
U64_MAX = (1 << 64) - 1

# The units of tollgate_core::rate, singular, in nanoseconds.
UNITS = {
    "s": NS_PER_S,
    "sec": NS_PER_S,
    "second": NS_PER_S,
    "m": 60 * NS_PER_S,
    "min": 60 * NS_PER_S,
    "minute": 60 * NS_PER_S,
    "h": 3600 * NS_PER_S,
    "hr": 3600 * NS_PER_S,
    "hour": 3600 * NS_PER_S,
    "d": 86400 * NS_PER_S,
    "day": 86400 * NS_PER_S,
    "w": 7 * 86400 * NS_PER_S,
    "wk": 7 * 86400 * NS_PER_S,
    "week": 7 * 86400 * NS_PER_S,
    "millisecond": NS_PER_MS,
    "msec": NS_PER_MS,
}

WHITESPACE = "\t\n\v\f\r "


def period_ns(text):
    """Nanoseconds of `[n]unit` as tollgate_core::rate::parse_period reads
    it (saturating at 2^64 - 1), or None when it does not parse."""
    text = text.strip(WHITESPACE)
    digits = re.match(r"[0-9]*", text).group(0)
    unit = text[len(digits):].strip(WHITESPACE).lower()
    if unit == "ms":
        unit_ns = NS_PER_MS
    else:
        singular = unit[:-1] if unit.endswith("s") and len(unit) > 1 else unit
        unit_ns = UNITS.get(singular)
    if unit_ns is None:
        return None
    return min((int(digits) if digits else 1) * unit_ns, U64_MAX)


def rate_period_ns(rate):
    """The period of a rate text in nanoseconds, or None."""
    if "/" in rate:
        _, period = rate.split("/", 1)
    else:
        at = rate.lower().find(" per ")
        if at < 0:
            return None
        period = rate[at + len(" per "):]
    return period_ns(period)


def step_fits(step, window_ns):
    """Whether a `step` text is between 1 ms and `window_ns`; True when
    either is not a well-formed value (the schema decides those)."""
    if not isinstance(step, str) or window_ns is None:
        return True
    step_ns = period_ns(step)
    return step_ns is None or NS_PER_MS <= step_ns <= window_ns


def key_fits(key):
    return not isinstance(key, str) or len(key.encode("utf-8", "surrogatepass")) <= MAX_KEY_BYTES


def limit_fits(limit):
    if not isinstance(limit, dict) or not isinstance(limit.get("rate"), str):
        return True
    period = rate_period_ns(limit["rate"])
    if period is not None and period > MAX_PERIOD_NS:
        return False
    return step_fits(limit.get("step"), period)


def capacity(limit):
    """The most a limit can ever admit at once, or None when unknown."""
    burst = limit.get("burst")
    if isinstance(burst, (int, float)) and not isinstance(burst, bool):
        return burst
    rate = limit.get("rate")
    if not isinstance(rate, str):
        return None
    count = re.match(r"[\t\n\v\f\r ]*\+?([0-9]+)", rate)
    return int(count.group(1)) if count else None


def cost_fits(body):
    cost = body.get("cost")
    if isinstance(cost, bool) or not isinstance(cost, (int, float)):
        return True
    limit = body.get("limit")
    most = capacity(limit) if isinstance(limit, dict) else SAMPLE_SMALLEST_CAPACITY
    return most is None or cost <= most


def settle_fits(body):
    if body.get("settle") is not True:
        return True
    cost = body.get("cost", 1)
    if cost is None:
        cost = 1
    if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost < 1:
        return False
    limit = body.get("limit")
    algorithm = limit.get("algorithm") if isinstance(limit, dict) else None
    return algorithm != "concurrency"


def interval_ns(interval):
    if isinstance(interval, bool) or not isinstance(interval, (int, float)):
        return None
    if isinstance(interval, float) and not interval.is_integer():
        return None
    return int(interval) * NS_PER_S


# Case-level hooks: the coverage phase applies only these, the fuzzing
# phase these as well.


def envoy_hits_fit(body):
    """Whether every descriptor's hits fit its limit, for a request to a
    domain of the sample rules (any other domain has no rules: nothing is
    counted). Hits are the descriptor's own `hits_addend` when set,
    otherwise `max(1, request.hits_addend)`; numbers may come as strings or
    as integral floats."""
    domain = body.get("domain")
    smallest = SAMPLE_DOMAIN_CAPACITY.get(domain) if isinstance(domain, str) else None
    if smallest is None:
        return True

    def number(value):
        # The schema's decimal strings may carry a leading `+`.
        if isinstance(value, str) and re.fullmatch(r"\+?[0-9]+", value):
            return int(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        return None

    request_hits = number(body.get("hits_addend", body.get("hitsAddend", 0))) or 0
    descriptors = body.get("descriptors")
    if not isinstance(descriptors, list):
        return True
    for descriptor in descriptors:
        if not isinstance(descriptor, dict):
            continue
        own = descriptor.get("hits_addend", descriptor.get("hitsAddend"))
        hits = number(own) if own is not None else max(1, request_hits)
        if hits is None:
            continue
        most = smallest
        limit = descriptor.get("limit")
        if isinstance(limit, dict):
            per_unit = number(limit.get("requests_per_unit", limit.get("requestsPerUnit", 0)))
            most = per_unit if per_unit is not None else most
        if hits > most:
            return False
    return True


def with_real_zone(limit):
    """`limit` with a generated `timezone` string replaced by a real zone
    (chosen by the generated text, so a case maps the same way each time)."""
    zone = limit.get("timezone")
    if not isinstance(zone, str) or zone in SAMPLE_ZONES:
        return limit
    return {**limit, "timezone": SAMPLE_ZONES[sum(map(ord, zone)) % len(SAMPLE_ZONES)]}


ALGORITHMS = {
    "token_bucket", "gcra", "leaky_bucket", "fixed_window", "sliding_window_log",
    "sliding_window_counter", "stepped_window", "concurrency",
}
BUCKETS = {"token_bucket", "gcra", "leaky_bucket"}
UNIT_NS = {
    "second": NS_PER_S,
    "minute": 60 * NS_PER_S,
    "hour": 3600 * NS_PER_S,
    "day": 86400 * NS_PER_S,
    "week": 7 * 86400 * NS_PER_S,
    "month": 30 * 86400 * NS_PER_S,
    "year": 365 * 86400 * NS_PER_S,
}
# The override limits kept: at most this many a period, so that every
# algorithm's state fits (a sliding log keeps one timestamp per request).
OVERRIDE_MOST = 10_000


def is_int(value):
    """An integer as JSON Schema has it (`20.0` is one; the server reads
    it as 20)."""
    if isinstance(value, float):
        return value.is_integer()
    return isinstance(value, int) and not isinstance(value, bool)


def override_limit_fits(limit):
    """A conservative subset of the limits the rules accept: `unit` (not
    `window`), a count between the sample's smallest capacity and
    OVERRIDE_MOST, a known algorithm, `burst` only on a bucket and at least
    the count, `sync` (not `async` on `concurrency`), and no `step`,
    `lease_ttl`, `ban` or `replaces` (the Rust tests cover those); or
    `unlimited: true` alone."""
    if not isinstance(limit, dict):
        return False
    if limit.get("unlimited") is True:
        return set(limit) <= {"unlimited", "name"} and isinstance(limit.get("name", ""), str)
    if set(limit) - {"unit", "requests_per_unit", "algorithm", "burst", "name", "unlimited", "sync"}:
        return False
    if limit.get("unlimited", False) is not False or limit.get("unit") not in UNIT_NS:
        return False
    count = limit.get("requests_per_unit")
    if not is_int(count) or not SAMPLE_SMALLEST_CAPACITY <= count <= OVERRIDE_MOST:
        return False
    algorithm = limit.get("algorithm", "fixed_window")
    if algorithm not in ALGORITHMS:
        return False
    sync = limit.get("sync", "exact")
    if sync not in ("exact", "async") or (sync == "async" and algorithm == "concurrency"):
        return False
    if "burst" in limit:
        burst = limit["burst"]
        if algorithm not in BUCKETS or not is_int(burst) or not count <= burst <= OVERRIDE_MOST:
            return False
    return isinstance(limit.get("name", ""), str)


def override_fits(body):
    """Whether a PUT body's entries fit the key size and its limit is one
    override_limit_fits keeps (exactly one of the two forms; names in one
    list agree, and no limit twice)."""
    entries = body.get("entries")
    if isinstance(entries, list):
        for entry in entries:
            if isinstance(entry, dict) and isinstance(entry.get("key"), str):
                value = entry.get("value", "")
                if isinstance(value, str) and not key_fits(entry["key"] + value):
                    return False
    for flag in ("shadow_mode", "quota_mode"):
        if flag in body and not isinstance(body[flag], bool):
            return False
    one, several = body.get("rate_limit"), body.get("rate_limits")
    if (one is None) == (several is None):
        return False
    if one is not None:
        return override_limit_fits(one)
    if not isinstance(several, list) or not several:
        return False
    if not all(override_limit_fits(l) and not l.get("unlimited") for l in several):
        return False
    names = {l["name"] for l in several if l.get("name")}
    limits = [(l["unit"], l["requests_per_unit"], l.get("algorithm", "fixed_window"), l.get("burst"))
              for l in several]
    return len(names) <= 1 and len(set(limits)) == len(limits)


def clamp(value, low, high):
    return max(low, min(high, int(value)))


def mended_override_limit(limit):
    """`limit` (a valid OverrideLimit) made one that override_limit_fits
    keeps: what it keeps of the generated fields, clamped into range."""
    if limit.get("unlimited") is True:
        mended = {"unlimited": True}
        if isinstance(limit.get("name"), str):
            mended["name"] = limit["name"]
        return mended
    count = limit.get("requests_per_unit")
    count = clamp(count, SAMPLE_SMALLEST_CAPACITY, OVERRIDE_MOST) if is_int(count) else SAMPLE_SMALLEST_CAPACITY
    mended = {
        "unit": limit["unit"] if limit.get("unit") in UNIT_NS else "minute",
        "requests_per_unit": count,
    }
    algorithm = limit.get("algorithm")
    if algorithm in ALGORITHMS:
        mended["algorithm"] = algorithm
    if algorithm in BUCKETS and is_int(limit.get("burst")):
        mended["burst"] = clamp(limit["burst"], count, OVERRIDE_MOST)
    if limit.get("sync") == "exact" or (limit.get("sync") == "async" and algorithm != "concurrency"):
        mended["sync"] = limit["sync"]
    if isinstance(limit.get("name"), str):
        mended["name"] = limit["name"]
    return mended


def mended_override(body):
    """A valid PUT body made one that override_fits keeps: exactly one
    of `rate_limit` and `rate_limits`, each limit mended, one name and no
    limit twice in a list. Entries too long for a key stay (dropped by
    filter_case)."""
    body = dict(body)
    one, several = body.get("rate_limit"), body.get("rate_limits")
    if isinstance(one, dict) or not isinstance(several, list) or not several:
        body.pop("rate_limits", None)
        body["rate_limit"] = mended_override_limit(one if isinstance(one, dict) else {})
        return body
    body.pop("rate_limit", None)
    name = next((l.get("name") for l in several if isinstance(l, dict) and l.get("name")), None)
    mended, seen = [], set()
    for limit in several:
        limit = mended_override_limit({**limit, "unlimited": False} if isinstance(limit, dict) else {})
        limit.pop("name", None)
        if name is not None:
            limit["name"] = name
        shape = (limit["unit"], limit["requests_per_unit"], limit.get("algorithm", "fixed_window"), limit.get("burst"))
        if shape not in seen:
            seen.add(shape)
            mended.append(limit)
    body["rate_limits"] = mended
    return body


def body_is_negative(case):
    """Whether the case's body was generated to break the schema (the
    server must refuse it whatever it holds)."""
    meta = getattr(case, "meta", None)
    return meta is not None and meta.is_negative_at(ParameterLocation.BODY)


def mends_override(case):
    """Whether `case` is a PUT of a valid override body, which map_case
    mends."""
    return (
        case.operation.path == "/v1/overrides/{domain}"
        and case.method.upper() == "PUT"
        and isinstance(case.body, dict)
        and not body_is_negative(case)
    )


@schemathesis.hook
def map_case(context, case):
    if mends_override(case):
        case.body = mended_override(case.body)
    if case.operation.path == "/v1/overrides/{domain}" and isinstance(case.path_parameters, dict):
        domain = case.path_parameters.get("domain")
        # A domain the schema refuses (over 256 characters) stays as it is.
        if isinstance(domain, str) and 1 <= len(domain) <= 256:
            case.path_parameters = {**case.path_parameters, "domain": SAMPLE_DOMAIN}
    body = case.body
    if (
        isinstance(body, dict)
        and isinstance(body.get("domain"), str)
        and body["domain"]
        and case.operation.path.startswith("/v1/")
    ):
        case.body = body = {**body, "domain": SAMPLE_DOMAIN}
    if isinstance(body, dict) and isinstance(body.get("limit"), dict):
        case.body = {**body, "limit": with_real_zone(body["limit"])}
    return case


def body_fits(body):
    """Whether `body`, as JSON, is within the server's body cap, however
    the client escapes it."""
    if not isinstance(body, (dict, list)):
        return True
    try:
        escaped = len(json.dumps(body))
        raw = len(json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    except (TypeError, ValueError):
        return True
    return max(escaped, raw) <= MAX_BODY_BYTES


@schemathesis.hook
def filter_case(context, case):
    path = case.operation.path
    body, query, path_parameters = case.body, case.query, case.path_parameters
    if not body_fits(body):
        return False
    if isinstance(body, dict):
        if not key_fits(body.get("key")) or not limit_fits(body.get("limit")):
            return False
        if path in ("/v1/check", "/v1/reserve", "/v1/dashboard/peek") and not cost_fits(body):
            return False
        if path == "/v1/check" and not settle_fits(body):
            return False
        if path == "/increment" and not (
            key_fits(body.get("id"))
            and step_fits(body.get("step"), interval_ns(body.get("interval")))
        ):
            return False
    if path == "/json" and isinstance(body, dict) and not envoy_hits_fit(body):
        return False
    if path == "/v1/overrides/{domain}":
        method = case.method.upper()
        if mends_override(case) and not override_fits(mended_override(body)):
            return False
        if method == "DELETE" and isinstance(body, dict) and not override_fits(
            {**body, "rate_limit": {"unlimited": True}}
        ):
            return False
        if method == "GET" and isinstance(query, dict) and query.get("cursor"):
            return False
    if path == "/delay" and isinstance(query, dict):
        interval = query.get("interval")
        if isinstance(interval, str) and interval.isdigit():
            interval = int(interval)
        if not (key_fits(query.get("id")) and step_fits(query.get("step"), interval_ns(interval))):
            return False
    if isinstance(path_parameters, dict) and not key_fits(path_parameters.get("key")):
        return False
    return True
