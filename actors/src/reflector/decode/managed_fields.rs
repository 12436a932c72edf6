//! A deserializer adapter that hands the object every field except
//! `metadata.managedFields`, which the parser skips: it is never
//! allocated, unlike a transform applied after decoding.

use std::fmt;

use serde::de::value::{BorrowedStrDeserializer, StringDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::key::Key;

/// Where a [`WithoutManagedFields`] is in the object: at its top, or inside its `metadata`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Object,
    Metadata,
}

/// A deserializer that hands `K` every field except
/// `metadata.managedFields`, which the parser skips.
pub(super) struct WithoutManagedFields<D> {
    inner: D,
    level: Level,
}

impl<D> WithoutManagedFields<D> {
    /// Wraps the deserializer of a whole object.
    pub(super) fn object(inner: D) -> Self {
        WithoutManagedFields {
            inner,
            level: Level::Object,
        }
    }
}

macro_rules! forward_plain {
    ($($method:ident),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
                self.inner.$method(visitor)
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for WithoutManagedFields<D> {
    type Error = D::Error;

    forward_plain!(
        deserialize_bool,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_i128,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_u128,
        deserialize_f32,
        deserialize_f64,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_unit,
        deserialize_seq,
        deserialize_identifier,
        deserialize_ignored_any,
    );

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        let level = self.level;
        self.inner.deserialize_any(FilterVisitor {
            inner: visitor,
            level,
        })
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        let level = self.level;
        self.inner.deserialize_option(FilterVisitor {
            inner: visitor,
            level,
        })
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        let level = self.level;
        self.inner.deserialize_map(FilterVisitor {
            inner: visitor,
            level,
        })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let level = self.level;
        self.inner.deserialize_struct(
            name,
            fields,
            FilterVisitor {
                inner: visitor,
                level,
            },
        )
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let level = self.level;
        self.inner.deserialize_newtype_struct(
            name,
            FilterVisitor {
                inner: visitor,
                level,
            },
        )
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_tuple(len, visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_tuple_struct(name, len, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_enum(name, variants, visitor)
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

/// The visitor of a [`WithoutManagedFields`]: maps get their keys filtered; options and
/// newtypes pass the filter on.
struct FilterVisitor<V> {
    inner: V,
    level: Level,
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty)),* $(,)?) => {
        $(
            fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
                self.inner.$method(v)
            }
        )*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for FilterVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }

    forward_visit!(
        visit_bool(bool),
        visit_i8(i8),
        visit_i16(i16),
        visit_i32(i32),
        visit_i64(i64),
        visit_i128(i128),
        visit_u8(u8),
        visit_u16(u16),
        visit_u32(u32),
        visit_u64(u64),
        visit_u128(u128),
        visit_f32(f32),
        visit_f64(f64),
        visit_char(char),
        visit_str(&str),
        visit_borrowed_str(&'de str),
        visit_string(String),
        visit_bytes(&[u8]),
        visit_borrowed_bytes(&'de [u8]),
        visit_byte_buf(Vec<u8>),
    );

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(WithoutManagedFields {
            inner: d,
            level: self.level,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_newtype_struct(WithoutManagedFields {
            inner: d,
            level: self.level,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(FilterMap {
            inner: map,
            level: self.level,
            metadata_next: false,
        })
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.inner.visit_enum(data)
    }
}

/// The entries of a filtered map: at the object level, `metadata`'s value
/// is filtered again; at the metadata level, `managedFields` is skipped.
struct FilterMap<A> {
    inner: A,
    level: Level,
    metadata_next: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for FilterMap<A> {
    type Error = A::Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        loop {
            let Some(key) = self.inner.next_key::<Key<'de>>()? else {
                return Ok(None);
            };
            if self.level == Level::Metadata && key.as_str() == "managedFields" {
                self.inner.next_value::<IgnoredAny>()?;
                continue;
            }
            self.metadata_next = self.level == Level::Object && key.as_str() == "metadata";
            return match key {
                Key::Borrowed(s) => seed
                    .deserialize(BorrowedStrDeserializer::<A::Error>::new(s))
                    .map(Some),
                Key::Owned(s) => seed
                    .deserialize(StringDeserializer::<A::Error>::new(s))
                    .map(Some),
            };
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        if std::mem::take(&mut self.metadata_next) {
            self.inner.next_value_seed(MetadataSeed(seed))
        } else {
            self.inner.next_value_seed(seed)
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// Decodes `metadata` through a metadata-level [`WithoutManagedFields`].
struct MetadataSeed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for MetadataSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(WithoutManagedFields {
            inner: d,
            level: Level::Metadata,
        })
    }
}
