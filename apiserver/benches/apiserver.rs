//! Placeholder; replaced by the real benchmark.
fn main() {}
