//! v1 gRPC contracts (placeholder, being written).
