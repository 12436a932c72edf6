//! Rendezvous (highest random weight) hashing: a key belongs to the member
//! whose score for it is highest (SH-1). Removing a member moves only its
//! keys; adding one moves to it only the keys it now wins, about `1/n`.

use xxhash_rust::xxh3::Xxh3;

/// The score of `member` for `key`: XXH3-64 of the member, a separator no
/// identity or key contains, and the key. The same in every process and
/// every build.
pub fn score(member: &str, key: &str) -> u64 {
    let mut h = Xxh3::new();
    h.update(member.as_bytes());
    h.update(&[0xff]);
    h.update(key.as_bytes());
    h.digest()
}

/// The member of `members` that owns `key`: the highest score, ties (of
/// 64-bit scores: practically never) to the greater identity. `None` when
/// there are no members.
pub fn owner<'a>(members: &'a [String], key: &str) -> Option<&'a str> {
    members
        .iter()
        .map(|m| (score(m, key), m.as_str()))
        .max()
        .map(|(_, m)| m)
}
