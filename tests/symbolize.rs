//! End-to-end symbolization: debug files by build id, inlines, mismatches, kernel symbols.
