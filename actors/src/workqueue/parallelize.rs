//! WQ-8 `ParallelizeUntil`: a piece of work split in chunks over a bounded
//! number of concurrent workers.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Runs `f(piece)` for every piece in `0..pieces`, claimed `chunk_size` at a
/// time (at least 1) by `min(workers, chunks)` concurrent workers (at least
/// one). Each piece runs exactly once unless `cancelled()` turns true, which
/// is checked before each piece; `pieces == 0` returns at once. The workers
/// are futures polled by the caller's task: concurrent, on one thread.
pub async fn parallelize_until<F, Fut>(
    workers: usize,
    pieces: usize,
    chunk_size: usize,
    cancelled: impl Fn() -> bool,
    f: F,
) where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    let chunk_size = chunk_size.max(1);
    let chunks = pieces.div_ceil(chunk_size);
    let next = AtomicUsize::new(0);
    let worker = || async {
        loop {
            let chunk = next.fetch_add(1, Ordering::Relaxed);
            if chunk >= chunks {
                return;
            }
            let start = chunk * chunk_size;
            for piece in start..(start + chunk_size).min(pieces) {
                if cancelled() {
                    return;
                }
                f(piece).await;
            }
        }
    };
    futures::future::join_all((0..workers.max(1).min(chunks)).map(|_| worker())).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};
    use std::task::Poll;

    async fn yield_once() {
        let mut yielded = false;
        std::future::poll_fn(|cx| {
            if yielded {
                return Poll::Ready(());
            }
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        })
        .await
    }

    /// WQ-T14: every piece is visited exactly once, by at most `workers` at a time.
    #[test]
    fn wq_t14_parallelize_until() {
        for (pieces, workers, chunk) in [
            (1000, 10, 1),
            (1000, 10, 10),
            (1000, 10, 100),
            (999, 10, 13),
        ] {
            let seen = RefCell::new(vec![0u32; pieces]);
            let (running, most) = (Cell::new(0), Cell::new(0));
            futures::executor::block_on(parallelize_until(
                workers,
                pieces,
                chunk,
                || false,
                |p| {
                    let (seen, running, most) = (&seen, &running, &most);
                    async move {
                        running.set(running.get() + 1);
                        most.set(most.get().max(running.get()));
                        yield_once().await; // the other workers run meanwhile
                        seen.borrow_mut()[p] += 1;
                        running.set(running.get() - 1);
                    }
                },
            ));
            assert!(
                seen.borrow().iter().all(|&n| n == 1),
                "{pieces}/{workers}/{chunk}"
            );
            assert_eq!(most.get(), workers.min(pieces.div_ceil(chunk)));
        }
    }

    #[test]
    fn nothing_to_do_returns_at_once_and_a_cancel_stops_before_the_next_piece() {
        futures::executor::block_on(parallelize_until(
            4,
            0,
            1,
            || false,
            |_| async { unreachable!() },
        ));
        let done = Cell::new(0);
        futures::executor::block_on(parallelize_until(
            1,
            100,
            10,
            || done.get() >= 5,
            |_| {
                done.set(done.get() + 1);
                async {}
            },
        ));
        assert_eq!(done.get(), 5);
    }
}
