#!/usr/bin/env python3
"""tests/tools/prom_parse.py FILE|URL: parse Prometheus text-format metrics with the reference
Python client's parser (Debian's python3-prometheus-client), as a scraper would.

Prints one line per sample, "type name{label=value,...} value" (labels sorted, values with
backslash and newline escaped as \\ and \n), then
"families N samples M"; exits 1 with the parser's message when the text does not parse, and 2
when the client is not installed. Used by tests/lua/test_prometheus.lua."""
import sys
import urllib.request

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError as e:  # the test says what to install
    print("prom_parse.py: prometheus_client is not installed (apt-get install python3-prometheus-client): %s" % e)
    sys.exit(2)


def main():
    src = sys.argv[1]
    if src.startswith("http://"):
        with urllib.request.urlopen(src, timeout=10) as r:
            ctype = r.headers.get("Content-Type", "")
            text = r.read().decode("utf-8")
        print("content-type " + ctype)
    else:
        with open(src, encoding="utf-8") as f:
            text = f.read()
    try:
        fams = list(text_string_to_metric_families(text))
    except Exception as e:  # noqa: BLE001 - any parser error is the test's failure
        print("parse error: %s: %s" % (type(e).__name__, e))
        sys.exit(1)
    n = 0
    for fam in fams:
        for s in fam.samples:
            # label values with backslashes and newlines escaped, so each sample stays on its line
            labels = ",".join("%s=%s" % (k, s.labels[k].encode("unicode_escape").decode("ascii"))
                              for k in sorted(s.labels))
            print("%s %s{%s} %r" % (fam.type, s.name, labels, s.value))
            n += 1
    print("families %d samples %d" % (len(fams), n))


if __name__ == "__main__":
    main()
