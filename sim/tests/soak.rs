//! The soak's 2-minute form (the 30-minute one is the `kinformer-soak`
//! binary, RELIABILITY.md):
//!
//! ```text
//! cargo test --release -p kinformer-sim --test soak -- --ignored --nocapture
//! ```

use std::time::Duration;

use kinformer_sim::soak::{SoakConfig, soak};

#[actix::test]
#[ignore = "a 2-minute soak: run with --ignored (release build advised)"]
async fn two_minute_soak_loses_nothing() {
    let config = SoakConfig {
        duration: Duration::from_secs(120),
        fault_every: Duration::from_secs(10),
        checkpoint_every: Duration::from_secs(30),
        ..SoakConfig::default()
    };
    let report = soak(config, |l| eprintln!("{l}")).await.unwrap();
    eprintln!("{report:#?}");
    assert!(report.checkpoints >= 3, "{report:?}");
    assert_eq!(report.lost, 0, "{:?}", report.divergences);
    assert!(
        report.writes > 60_000,
        "the writer kept its rate: {}",
        report.writes
    );
}
