//! gRPC adapter (being written).
