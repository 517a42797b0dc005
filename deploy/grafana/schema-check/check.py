"""Writes check.ts: deploy/grafana/fleetlens.json as a TypeScript object literal that must satisfy
the `Dashboard` type @grafana/schema generates from Grafana's dashboard schema (its CUE kind).
`tsc --noEmit` then refuses a missing required field, a value of the wrong type and, through
`satisfies`, any property the schema does not know (a misspelt key)."""
import json
import sys

dashboard = json.load(open(sys.argv[1]))
with open(sys.argv[2], "w") as out:
    out.write('import type { Dashboard } from "@grafana/schema/dist/esm/raw/dashboard/x/Dashboard_types.gen";\n')
    out.write("export const dashboard = " + json.dumps(dashboard, indent=1) + " satisfies Dashboard;\n")
