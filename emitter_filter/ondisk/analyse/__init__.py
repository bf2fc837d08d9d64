"""What a program's bytes are: live or dead (`analysis`), loadable or not (`validate`), which
contents several programs share (`share_find`), and the audit's findings (`audit_report`,
`explain_terms`). Built on `read/` alone."""
