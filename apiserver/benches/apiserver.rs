//! Placeholder (the API server helper replaces this).
fn main() {}
