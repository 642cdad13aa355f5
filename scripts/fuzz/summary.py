"""Summarise a Schemathesis run for `make fuzz`: one line a person (or CI log) can read.

Usage: summary.py JUNIT_XML HAR_JSON EXIT_CODE
Prints the failing operations with their failure codes, then
  fuzz: ok|FAILED: <ops> operations, <n> requests (<x> past 404), <f> failures in <o> operations; statuses
"""

import collections
import json
import sys
import xml.etree.ElementTree as ET


def main() -> int:
    junit, har, code = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ops, failing = 0, []
    try:
        root = ET.parse(junit).getroot()
        for tc in root.iter("testcase"):
            ops += 1
            for f in list(tc.findall("failure")) + list(tc.findall("error")):
                failing.append((tc.get("name"), f.get("message") or f.tag))
    except (OSError, ET.ParseError) as e:
        print(f"fuzz: no JUnit report ({e})")
    statuses = collections.Counter()
    try:
        with open(har, encoding="utf-8") as fh:
            for entry in json.load(fh)["log"]["entries"]:
                statuses[entry["response"]["status"]] += 1
    except (OSError, ValueError, KeyError) as e:
        print(f"fuzz: no HAR report ({e})")
    for name, msg in failing:
        print(f"fuzz: FAIL {name}: {msg}")
    total = sum(statuses.values())
    past404 = total - statuses[404]
    counts = " ".join(f"{s}:{n}" for s, n in sorted(statuses.items()))
    verdict = "ok" if code == 0 and not failing else f"FAILED (schemathesis exit {code})"
    failed_ops = len({name for name, _ in failing})
    print(f"fuzz: {verdict}: {ops} operations, {total} requests ({past404} past 404), "
          f"{len(failing)} failures in {failed_ops} operations; statuses {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
