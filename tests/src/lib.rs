//! Test support (placeholder).
