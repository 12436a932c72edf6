// The cache's tests, included twice by `cache.rs`: against the decoded
// cache and against the compact one (`new_cache`, `COMPACT`).

use super::*;
use std::collections::BTreeMap as Map;
use std::sync::mpsc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;

/// A ConfigMap named `name` whose `data.val` is `val`.
fn cm(name: &str, val: &str) -> Arc<ConfigMap> {
    Arc::new(ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..Default::default()
        },
        data: Some(Map::from([("val".to_owned(), val.to_owned())])),
        ..Default::default()
    })
}

fn val(obj: &ConfigMap) -> String {
    obj.data
        .as_ref()
        .and_then(|d| d.get("val"))
        .cloned()
        .unwrap_or_default()
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::from(name)
}

fn put(cache: &mut Cache<ConfigMap>, name: &str, v: &str) -> Upserted<ConfigMap> {
    cache.upsert(key(name), cm(name, v))
}

/// Indexes an object under its `val`.
fn by_val() -> IndexFn<ConfigMap> {
    Arc::new(|o: &ConfigMap| Ok(vec![val(o)]))
}

/// Indexes an object under each comma-separated part of its `val`.
fn split_val() -> IndexFn<ConfigMap> {
    Arc::new(|o: &ConfigMap| Ok(val(o).split(',').map(str::to_owned).collect()))
}

/// Fails for objects whose `val` is `bad`.
fn fallible() -> IndexFn<ConfigMap> {
    Arc::new(|o: &ConfigMap| {
        if val(o) == "bad" {
            Err("bad value".to_owned())
        } else {
            Ok(vec![val(o)])
        }
    })
}

fn vals(objs: &[Arc<ConfigMap>]) -> Vec<String> {
    let mut v: Vec<String> = objs.iter().map(|o| val(o)).collect();
    v.sort();
    v
}

fn names(objs: &[Arc<ConfigMap>]) -> Vec<String> {
    objs.iter()
        .filter_map(|o| o.metadata.name.clone())
        .collect()
}

fn keys_of(view: &CacheView<ConfigMap>, index: &str, value: &str) -> Vec<String> {
    view.index_keys(index, value)
        .unwrap()
        .iter()
        .map(|k| k.to_string())
        .collect()
}

#[test]
fn s_t1_store() {
    let mut c = new_cache();
    put(&mut c, "foo", "bar");
    assert_eq!(val(&c.get(&key("foo")).unwrap()), "bar");
    let up = put(&mut c, "foo", "baz");
    assert_eq!(val(&up.previous.unwrap().get().unwrap()), "bar");
    assert_eq!(val(&c.get(&key("foo")).unwrap()), "baz");
    assert_eq!(val(&c.remove(&key("foo")).unwrap()), "baz");
    assert!(c.get(&key("foo")).is_none());
    assert!(
        c.remove(&key("foo")).is_none(),
        "IDX-3: a missing key is a no-op"
    );

    put(&mut c, "a", "b");
    put(&mut c, "c", "d");
    put(&mut c, "e", "e");
    assert_eq!(vals(&c.list()), ["b", "d", "e"]);

    c.replace(vec![
        (key("foo"), cm("foo", "foo")),
        (key("bar"), cm("bar", "bar")),
    ]);
    assert_eq!(vals(&c.list()), ["bar", "foo"]);
    let mut keys: Vec<String> = c.keys().iter().map(|k| k.to_string()).collect();
    keys.sort();
    assert_eq!(keys, ["bar", "foo"]);
    assert_eq!(c.len(), 2);
    // Reads by string, without building a key.
    assert_eq!(val(&c.get("foo").unwrap()), "foo");
    assert!(c.contains("bar") && !c.contains("nope"));
    let mut iterated: Vec<(String, String)> = c
        .iter()
        .map(|(k, o)| (k.to_string(), val(&o).to_owned()))
        .collect();
    iterated.sort();
    assert_eq!(
        iterated,
        [("bar".into(), "bar".into()), ("foo".into(), "foo".into())]
    );
}

#[test]
fn s_t2_index() {
    let mut c = new_cache();
    assert!(c.add_index("by_val", by_val()).unwrap().is_empty());
    put(&mut c, "a", "b");
    put(&mut c, "c", "b");
    put(&mut c, "e", "f");
    put(&mut c, "g", "h");
    for (v, expected) in [("b", vec!["a", "c"]), ("f", vec!["e"]), ("h", vec!["g"])] {
        let found = c.index("by_val", &cm("probe", v)).unwrap();
        assert_eq!(names(&found), expected, "value {v}");
    }
}

#[test]
fn i_t1_get_index_func_values() {
    let label_foo: IndexFn<ConfigMap> = Arc::new(|o: &ConfigMap| {
        Ok(o.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("foo"))
            .cloned()
            .into_iter()
            .collect())
    });
    let pod = |name: &str, foo: &str| {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(Map::from([("foo".to_owned(), foo.to_owned())])),
                ..Default::default()
            },
            ..Default::default()
        })
    };
    let mut c = new_cache();
    c.add_index("testmodes", label_foo).unwrap();
    c.upsert(key("one"), pod("one", "bar"));
    c.upsert(key("two"), pod("two", "bar"));
    c.upsert(key("tre"), pod("tre", "biz"));
    assert_eq!(c.list_index_values("testmodes"), ["bar", "biz"]);
}

#[test]
fn t_t1_delete_removes_empty_sets_from_index() {
    let by_name: IndexFn<ConfigMap> =
        Arc::new(|o: &ConfigMap| Ok(o.metadata.name.clone().into_iter().collect()));
    let mut c = new_cache();
    c.add_index("by_name", by_name).unwrap();
    put(&mut c, "k", "v");
    assert_eq!(keys_of(&c, "by_name", "k"), ["k"]);
    c.remove(&key("k"));
    assert!(
        c.indices["by_name"].values.get("k").is_none(),
        "the value entry is removed"
    );
    assert!(c.list_index_values("by_name").is_empty());
}

#[test]
fn t_t2_add_keeps_non_empty_set_post_delete_from_index() {
    let constant: IndexFn<ConfigMap> =
        Arc::new(|_: &ConfigMap| Ok(vec!["constant".to_owned()]));
    let mut c = new_cache();
    c.add_index("by_constant", constant).unwrap();
    put(&mut c, "retain", "x");
    put(&mut c, "delete", "x");
    c.remove(&key("delete"));
    assert_eq!(
        c.indices["by_constant"]
            .values
            .get("constant")
            .map(|s| s.len()),
        Some(1)
    );
    assert_eq!(keys_of(&c, "by_constant", "constant"), ["retain"]);
}

#[test]
fn t_t3_multiple_values() {
    let mut c = new_cache();
    c.add_index("split", split_val()).unwrap();
    let check = |c: &Cache<ConfigMap>, foo: &[&str], bar: &[&str], baz: &[&str]| {
        assert_eq!(keys_of(c, "split", "foo"), foo, "foo");
        assert_eq!(keys_of(c, "split", "bar"), bar, "bar");
        assert_eq!(keys_of(c, "split", "baz"), baz, "baz");
        // IDX-6: no empty value sets are left behind
        assert!(c.indices["split"].values.values().all(|s| !s.is_empty()));
    };
    put(&mut c, "key1", "foo");
    put(&mut c, "key2", "bar");
    check(&c, &["key1"], &["key2"], &[]);
    put(&mut c, "key2", "foo,bar");
    check(&c, &["key1", "key2"], &["key2"], &[]);
    put(&mut c, "key1", "foo,bar");
    check(&c, &["key1", "key2"], &["key1", "key2"], &[]);
    put(&mut c, "key3", "foo,bar,baz");
    check(
        &c,
        &["key1", "key2", "key3"],
        &["key1", "key2", "key3"],
        &["key3"],
    );
    put(&mut c, "key1", "foo");
    check(&c, &["key1", "key2", "key3"], &["key2", "key3"], &["key3"]);
    put(&mut c, "key2", "bar");
    check(&c, &["key1", "key3"], &["key2", "key3"], &["key3"]);
    c.remove(&key("key1"));
    check(&c, &["key3"], &["key2", "key3"], &["key3"]);
    c.remove(&key("key3"));
    check(&c, &[], &["key2"], &[]);
    assert_eq!(c.list_index_values("split"), ["bar"]);
}

#[test]
fn idx_7_index_is_the_union_over_values_each_once() {
    let mut c = new_cache();
    c.add_index("split", split_val()).unwrap();
    put(&mut c, "a", "x,y");
    put(&mut c, "b", "y");
    put(&mut c, "c", "z");
    let found = c.index("split", &cm("probe", "x,y,y")).unwrap();
    assert_eq!(names(&found), ["a", "b"]);
    assert!(c.index("split", &cm("probe", "none")).unwrap().is_empty());
}

#[test]
fn idx_8_idx_9_unknown_index_and_value() {
    let mut c = new_cache();
    c.add_index("by_val", by_val()).unwrap();
    put(&mut c, "a", "b");
    let unknown = CacheError::UnknownIndex("nope".to_owned());
    assert_eq!(c.by_index("nope", "b").unwrap_err(), unknown);
    assert_eq!(c.index_keys("nope", "b").unwrap_err(), unknown);
    assert_eq!(c.index("nope", &cm("a", "b")).unwrap_err(), unknown);
    assert_eq!(unknown.to_string(), "index with name nope does not exist");
    assert!(c.list_index_values("nope").is_empty(), "IDX-9: no error");
    assert!(
        c.by_index("by_val", "zzz").unwrap().is_empty(),
        "an unknown value is empty"
    );
    assert_eq!(names(&c.by_index("by_val", "b").unwrap()), ["a"]);
}

#[test]
fn idx_10_add_index_after_data_reindexes_and_conflicts() {
    let mut c = new_cache();
    put(&mut c, "a", "x");
    put(&mut c, "b", "y");
    put(&mut c, "c", "x");
    assert!(c.add_index("by_val", by_val()).unwrap().is_empty());
    assert_eq!(keys_of(&c, "by_val", "x"), ["a", "c"]);
    assert_eq!(keys_of(&c, "by_val", "y"), ["b"]);
    let err = c.add_index("by_val", split_val()).unwrap_err();
    assert_eq!(err, CacheError::IndexConflict(vec!["by_val".to_owned()]));
    assert_eq!(
        keys_of(&c, "by_val", "x"),
        ["a", "c"],
        "the existing index is untouched"
    );
    // later writes keep both indexes up to date
    c.add_index("split", split_val()).unwrap();
    put(&mut c, "b", "x,z");
    assert_eq!(keys_of(&c, "by_val", "x,z"), ["b"]);
    assert_eq!(keys_of(&c, "split", "x"), ["a", "b", "c"]);
    assert_eq!(c.index_names(), ["by_val", "split"]);
}

#[test]
fn idx_5_replace_later_duplicate_wins_and_indices_rebuilt() {
    let mut c = new_cache();
    c.add_index("by_val", by_val()).unwrap();
    put(&mut c, "old", "x");
    let errors = c.replace(vec![
        (key("a"), cm("a", "1")),
        (key("b"), cm("b", "2")),
        (key("a"), cm("a", "3")),
    ]);
    assert!(errors.is_empty());
    assert_eq!(c.len(), 2);
    assert_eq!(val(&c.get(&key("a")).unwrap()), "3");
    assert_eq!(
        c.list_index_values("by_val"),
        ["2", "3"],
        "old values are gone"
    );
}

#[test]
fn index_func_panic_is_contained_as_an_error() {
    let mut c = new_cache();
    let panicky: IndexFn<ConfigMap> = Arc::new(|o: &ConfigMap| {
        if val(o) == "boom" {
            panic!("index bug (expected by the test)");
        }
        Ok(vec![val(o)])
    });
    c.add_index("p", panicky).unwrap();
    let up = put(&mut c, "a", "boom");
    assert_eq!(up.index_errors.len(), 1);
    assert_eq!(up.index_errors[0].message, "index function panicked");
    assert!(c.contains(&key("a")));
    assert!(put(&mut c, "b", "fine").index_errors.is_empty());
    assert_eq!(keys_of(&c, "p", "fine"), ["b"]);
}

#[test]
fn index_func_failure_is_an_error_value_not_a_panic() {
    let mut c = new_cache();
    put(&mut c, "pre", "bad");
    let errors = c.add_index("f", fallible()).unwrap();
    assert_eq!(
        errors,
        [IndexError {
            index: "f".into(),
            key: key("pre"),
            message: "bad value".into()
        }]
    );

    let up = put(&mut c, "a", "bad");
    assert_eq!(up.index_errors.len(), 1);
    assert_eq!(up.index_errors[0].key, key("a"));
    assert!(c.contains(&key("a")), "the object is stored anyway");
    assert!(
        c.list_index_values("f").is_empty(),
        "indexed under no value"
    );

    // Becoming valid indexes it; becoming invalid again unindexes it.
    assert!(put(&mut c, "a", "good").index_errors.is_empty());
    assert_eq!(keys_of(&c, "f", "good"), ["a"]);
    assert_eq!(put(&mut c, "a", "bad").index_errors.len(), 1);
    assert!(c.list_index_values("f").is_empty());
    assert!(c.remove(&key("a")).is_some());

    let errors = c.replace(vec![(key("x"), cm("x", "bad")), (key("y"), cm("y", "ok"))]);
    assert_eq!(errors.len(), 1);
    assert_eq!(c.len(), 2);
    assert_eq!(keys_of(&c, "f", "ok"), ["y"]);

    let err = c.index("f", &cm("probe", "bad")).unwrap_err();
    assert!(
        matches!(err, CacheError::IndexFunc(IndexError { ref message, .. }) if message == "bad value")
    );
}

#[test]
fn idx_13_objects_are_shared() {
    let obj = cm("a", "x");
    let mut c = new_cache();
    c.add_index("by_val", by_val()).unwrap();
    c.upsert(key("a"), obj.clone());
    if COMPACT {
        // Decoded on every read: equal content, not the same allocation.
        assert_eq!(*c.get(&key("a")).unwrap(), *obj);
        assert_eq!(*c.by_index("by_val", "x").unwrap()[0], *obj);
        return;
    }
    assert!(Arc::ptr_eq(&c.get(&key("a")).unwrap(), &obj));
    assert!(Arc::ptr_eq(&c.by_index("by_val", "x").unwrap()[0], &obj));
    assert!(Arc::ptr_eq(&c.snapshot().get(&key("a")).unwrap(), &obj));
}

#[test]
fn snapshot_is_immutable_and_known_objects() {
    let mut c = new_cache();
    put(&mut c, "a", "1");
    let snap = c.snapshot();
    put(&mut c, "b", "2");
    c.remove(&key("a"));
    assert_eq!(snap.len(), 1);
    assert!(snap.contains(&key("a")) && !snap.contains(&key("b")));
    let known: &dyn KnownObjects<ConfigMap> = &snap;
    assert_eq!(known.known_keys(), [key("a")]);
    assert!(known.knows(&key("a")));
    assert_eq!(val(&known.known_object(&key("a")).unwrap()), "1");
    let known: &dyn KnownObjects<ConfigMap> = &c;
    assert_eq!(known.known_keys(), [key("b")]);
}

#[test]
fn readers_see_only_published_state() {
    let mut c = new_cache();
    let reader = c.reader();
    put(&mut c, "a", "1");
    assert!(reader.snapshot().is_empty(), "not published yet");
    assert_eq!(c.snapshot().len(), 1, "the writer's snapshot sees it");
    c.publish();
    assert_eq!(reader.snapshot().len(), 1);
    assert_eq!(reader.clone().snapshot().len(), 1);
}

#[test]
fn reader_on_another_thread_sees_published_snapshots_while_writer_continues() {
    const TOTAL: usize = 2_000;
    const EVERY: usize = 100;
    let mut c = new_cache();
    c.add_index("by_val", by_val()).unwrap();
    let reader = c.reader();
    let (tx, rx) = mpsc::channel();

    let handle = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut seen = Vec::new();
        loop {
            let snap = reader.snapshot();
            let n = snap.len();
            // Every published state is a consistent prefix: n objects,
            // each indexed under its own value.
            let consistent = (0..n).all(|i| {
                let name = format!("k{i:05}");
                snap.contains(&key(&name))
                    && snap
                        .index_keys("by_val", &name)
                        .is_ok_and(|k| k == [key(&name)])
            });
            seen.push((n, consistent));
            if n == TOTAL || std::time::Instant::now() > deadline {
                break;
            }
            std::thread::yield_now();
        }
        tx.send(seen).ok();
    });

    // The writer never waits for the reader.
    for i in 0..TOTAL {
        let name = format!("k{i:05}");
        put(&mut c, &name, &name);
        if (i + 1) % EVERY == 0 {
            c.publish();
        }
    }
    let seen = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the reader finished");
    handle.join().unwrap();
    assert_eq!(
        seen.last().map(|s| s.0),
        Some(TOTAL),
        "the reader saw the final state"
    );
    assert!(
        seen.iter().all(|&(n, ok)| ok && n % EVERY == 0),
        "only whole published states are visible"
    );
}
