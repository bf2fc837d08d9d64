"""What a program's bytes are: live or dead (`analysis`; what a file stores: `stored_ranges`;
what is dead and the one byte count: `dead_bytes`), loadable or not (`validate`, each method's
checks `method_checks`, the data maps `data_maps`), which contents several programs share
(`share_find`; their blobs `stored_blobs`, their keys `set_keys`), and the audit's findings
(`audit_report`, `explain_terms`). Built on `read/` alone."""
