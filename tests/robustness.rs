//! Bad-input corpus, stressed pipelines and fault reconciliation across all tools.
