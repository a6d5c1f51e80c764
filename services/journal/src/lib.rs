//! The journal (placeholder).
