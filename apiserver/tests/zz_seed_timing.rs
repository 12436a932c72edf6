#[test]
fn t() {
    let s = kinformer_apiserver::ApiServer::start_in_thread(Default::default()).unwrap();
    let t = std::time::Instant::now();
    s.seed_configmaps("x", 20_000).unwrap();
    eprintln!("20k: {:?}", t.elapsed());
    let v = s.get("", "configmaps", Some("x"), "seed-000001").unwrap();
    eprintln!("size {}", v.to_string().len());
}
