"""Fetches a Prometheus text exposition and parses it with prometheus_client's own parser (an
independent reader of the format); prints {family: [[labels, value], ...]} as JSON, or exits 1
with the parser's complaint."""
import json
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

text = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
out = {}
for family in text_string_to_metric_families(text):
    for s in family.samples:
        out.setdefault(s.name, []).append([s.labels, s.value])
print(json.dumps(out))
