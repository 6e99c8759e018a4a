#!/usr/bin/env python3
"""Reference validator of the grammar tests: Debian's python3-jsonschema (4.10.3 on Debian 12).

stdin: JSON [{"schema": <schema or null>, "instances": ["<json text>", ...]}, ...]
stdout: JSON [[null or "<why invalid>", ...], ...] -- null when the text parses with json.loads and
(when a schema is given) validates under Draft 2020-12 with the formats date, time, date-time and
uuid checked by the standard library (datetime, uuid), independently of the grammar code.
"""
import datetime
import json
import re
import sys
import uuid

import jsonschema

checker = jsonschema.FormatChecker(formats=())

TIME_RE = re.compile(r"^(\d\d):(\d\d):(\d\d)(\.\d+)?([zZ]|[+-](\d\d):(\d\d))$")


@checker.checks("date", raises=ValueError)
def check_date(s):
    if not isinstance(s, str):
        return True  # formats apply to strings only
    if not re.fullmatch(r"\d{4}-\d\d-\d\d", s):
        return False
    # RFC 3339 allows the year 0000, which Python's date does not; it is a leap year like 2000
    # (RFC 3339 appendix C: divisible by 400), so check the month and day with 2000 in its place.
    datetime.date.fromisoformat("2000" + s[4:] if s.startswith("0000") else s)  # ValueError: no such day
    return True


@checker.checks("time")
def check_time(s):
    if not isinstance(s, str):
        return True  # formats apply to strings only
    m = TIME_RE.match(s)
    if not m:
        return False
    h, mi, sec = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if m.group(6) is not None and (int(m.group(6)) > 23 or int(m.group(7)) > 59):
        return False
    return h <= 23 and mi <= 59 and sec <= 59


@checker.checks("date-time", raises=ValueError)
def check_date_time(s):
    if not isinstance(s, str):
        return True  # formats apply to strings only
    parts = re.split(r"[tT]", s)
    return len(parts) == 2 and check_date(parts[0]) and check_time(parts[1])


@checker.checks("uuid", raises=ValueError)
def check_uuid(s):
    if not isinstance(s, str):
        return True  # formats apply to strings only
    if not re.fullmatch(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", s):
        return False
    uuid.UUID(s)
    return True


def verdict(validator, text):
    try:
        value = json.loads(text)
    except ValueError as e:
        return f"json.loads: {e}"
    if validator is None:
        return None
    errors = sorted(validator.iter_errors(value), key=str)
    return str(errors[0].message) if errors else None


def main():
    out = []
    for case in json.load(sys.stdin):
        validator = None
        if case["schema"] is not None:
            validator = jsonschema.Draft202012Validator(case["schema"], format_checker=checker)
        out.append([verdict(validator, t) for t in case["instances"]])
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
