"""kvclaims.report: what `kvclaims demo` writes for a reader: pictures and `REPORT.md`.

One module per picture (`heatmap`, `capacity`, `timeline`, `diagram`), `verdicts` (every trace
the demo produced, checked by refinement and judged against its scenario's kind) and `report`
(the one document that answers the three questions). Every number a picture shows comes from
running the model or reading a trace; nothing is drawn from a formula or by hand. matplotlib
runs on the Agg backend, so no display is needed.
"""
