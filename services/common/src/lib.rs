//! Shared server plumbing (placeholder, being written).
