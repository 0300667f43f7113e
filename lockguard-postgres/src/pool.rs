//! The pool lockguard's statements go over: deadpool-postgres (lockguard's
//! own, or the application's) or, with the `sqlx` feature, the
//! application's `sqlx::PgPool`. The store speaks to either through the few
//! operations it needs: a connection, one statement with its parameters
//! (prepared once per connection by both drivers), the rows' columns, and a
//! batch of statements in one simple query.

use std::fmt;

use tokio_postgres::types::ToSql;

use crate::error::DbError;
use lockguard_core::{Error, ErrorKind, Result};

/// The application's or lockguard's pool.
#[derive(Clone)]
pub(crate) enum Pool {
    Deadpool(deadpool_postgres::Pool),
    #[cfg(feature = "sqlx")]
    Sqlx(sqlx::PgPool),
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Deadpool(p) => f.debug_tuple("Deadpool").field(&p.status()).finish(),
            #[cfg(feature = "sqlx")]
            Self::Sqlx(p) => f
                .debug_struct("Sqlx")
                .field("size", &p.size())
                .field("idle", &p.num_idle())
                .finish(),
        }
    }
}

impl Pool {
    /// A connection of the pool, for one statement or a few.
    pub(crate) async fn get(&self) -> std::result::Result<Conn, DbError> {
        match self {
            Self::Deadpool(p) => p.get().await.map(Conn::Deadpool).map_err(DbError::Pool),
            #[cfg(feature = "sqlx")]
            Self::Sqlx(p) => p.acquire().await.map(Conn::Sqlx).map_err(DbError::Sqlx),
        }
    }
}

/// A connection taken from the pool, back in it when dropped.
pub(crate) enum Conn {
    Deadpool(deadpool_postgres::Object),
    #[cfg(feature = "sqlx")]
    Sqlx(sqlx::pool::PoolConnection<sqlx::Postgres>),
}

/// A statement's parameter: the types lockguard's statements take.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Param<'a> {
    Text(&'a str),
    MaybeText(Option<&'a str>),
    Int8(i64),
    MaybeInt8(Option<i64>),
    Int4(i32),
    Bool(bool),
    Bytes(&'a [u8]),
    /// A `text[]`.
    Texts(&'a [&'a str]),
}

impl<'a> From<&'a str> for Param<'a> {
    fn from(v: &'a str) -> Self {
        Self::Text(v)
    }
}

impl<'a> From<&'a String> for Param<'a> {
    fn from(v: &'a String) -> Self {
        Self::Text(v)
    }
}

impl<'a> From<Option<&'a str>> for Param<'a> {
    fn from(v: Option<&'a str>) -> Self {
        Self::MaybeText(v)
    }
}

impl From<i64> for Param<'_> {
    fn from(v: i64) -> Self {
        Self::Int8(v)
    }
}

impl From<Option<i64>> for Param<'_> {
    fn from(v: Option<i64>) -> Self {
        Self::MaybeInt8(v)
    }
}

impl From<i32> for Param<'_> {
    fn from(v: i32) -> Self {
        Self::Int4(v)
    }
}

impl From<bool> for Param<'_> {
    fn from(v: bool) -> Self {
        Self::Bool(v)
    }
}

impl<'a> From<&'a [u8]> for Param<'a> {
    fn from(v: &'a [u8]) -> Self {
        Self::Bytes(v)
    }
}

impl<'a> From<&'a [&'a str]> for Param<'a> {
    fn from(v: &'a [&'a str]) -> Self {
        Self::Texts(v)
    }
}

impl<'a> Param<'a> {
    /// The parameter as tokio-postgres takes it.
    fn as_sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Self::Text(v) => v,
            Self::MaybeText(v) => v,
            Self::Int8(v) => v,
            Self::MaybeInt8(v) => v,
            Self::Int4(v) => v,
            Self::Bool(v) => v,
            Self::Bytes(v) => v,
            Self::Texts(v) => v,
        }
    }

    /// `query` with the parameter bound, as sqlx takes it.
    #[cfg(feature = "sqlx")]
    fn bind<'q>(
        self,
        query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>
    where
        'a: 'q,
    {
        match self {
            Self::Text(v) => query.bind(v),
            Self::MaybeText(v) => query.bind(v),
            Self::Int8(v) => query.bind(v),
            Self::MaybeInt8(v) => query.bind(v),
            Self::Int4(v) => query.bind(v),
            Self::Bool(v) => query.bind(v),
            Self::Bytes(v) => query.bind(v),
            Self::Texts(v) => query.bind(v),
        }
    }
}

/// A pooled connection whose caller stopped waiting for what it sent:
/// answered once it has run it (a `SELECT 1` queued behind), then back to
/// the pool (core's `InFlight`).
pub(crate) fn drain(
    mut conn: Conn,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(async move {
        let _ = conn.batch("SELECT 1").await;
    })
}

impl Conn {
    /// Runs one statement and returns its rows.
    pub(crate) async fn query(
        &mut self,
        sql: &str,
        params: &[Param<'_>],
    ) -> std::result::Result<Vec<Row>, DbError> {
        match self {
            Self::Deadpool(c) => {
                let stmt = c.prepare_cached(sql).await.map_err(DbError::Postgres)?;
                // Loops, not iterator adapters: a closure over the
                // parameters' lifetimes makes the future `Send` for one
                // lifetime only (rustc's higher-ranked `Send` limitation).
                let mut refs: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(params.len());
                for p in params {
                    refs.push(p.as_sql());
                }
                let rows = c.query(&stmt, &refs).await.map_err(DbError::Postgres)?;
                Ok(rows.into_iter().map(Row::Postgres).collect())
            }
            #[cfg(feature = "sqlx")]
            Self::Sqlx(c) => {
                let rows = sqlx_query(c, sql, params).await.map_err(DbError::Sqlx)?;
                Ok(rows.into_iter().map(Row::Sqlx).collect())
            }
        }
    }

    /// Runs `sql`, one or more statements, as one simple query: in one
    /// transaction unless `sql` says otherwise.
    pub(crate) async fn batch(&mut self, sql: &str) -> std::result::Result<(), DbError> {
        match self {
            Self::Deadpool(c) => c.batch_execute(sql).await.map_err(DbError::Postgres),
            #[cfg(feature = "sqlx")]
            Self::Sqlx(c) => sqlx_batch(c, sql).await.map(drop).map_err(DbError::Sqlx),
        }
    }
}

/// An sqlx request in flight. Made in a plain function, not awaited where
/// it is built: sqlx's executor bounds, held inside an `async fn`, make the
/// caller's future `Send` for one lifetime only (rustc's higher-ranked
/// `Send` limitation); boxed, the future is `Send` for every one.
#[cfg(feature = "sqlx")]
type SqlxFuture<'c, T> = std::pin::Pin<
    Box<dyn std::future::Future<Output = std::result::Result<T, sqlx::Error>> + Send + 'c>,
>;

/// One statement on an sqlx connection, its parameters bound.
#[cfg(feature = "sqlx")]
fn sqlx_query<'c>(
    conn: &'c mut sqlx::PgConnection,
    sql: &'c str,
    params: &[Param<'c>],
) -> SqlxFuture<'c, Vec<sqlx::postgres::PgRow>> {
    let mut query = sqlx::query(sql);
    for p in params {
        query = p.bind(query);
    }
    Box::pin(query.fetch_all(conn))
}

/// Statements in one simple query on an sqlx connection.
#[cfg(feature = "sqlx")]
fn sqlx_batch<'c>(
    conn: &'c mut sqlx::PgConnection,
    sql: &'c str,
) -> SqlxFuture<'c, sqlx::postgres::PgQueryResult> {
    sqlx::Executor::execute(conn, sqlx::raw_sql(sql))
}

/// A row of a statement's reply.
pub(crate) enum Row {
    Postgres(tokio_postgres::Row),
    #[cfg(feature = "sqlx")]
    Sqlx(sqlx::postgres::PgRow),
}

/// A column type lockguard reads, from either driver's rows.
pub(crate) trait Column: Sized {
    /// Column `i` of `row`, or a protocol error naming `what` (made only
    /// then: a reply read costs no formatting).
    fn read(row: &Row, i: usize, what: &dyn Fn() -> String) -> Result<Self>;
}

/// The error for a column that is not what lockguard's statement returns.
fn unexpected(what: &dyn Fn() -> String) -> Error {
    Error::new(
        ErrorKind::Protocol,
        format!("{}: unexpected reply from postgres", what()),
    )
}

macro_rules! columns {
    ($($t:ty),*) => {$(
        impl Column for $t {
            fn read(row: &Row, i: usize, what: &dyn Fn() -> String) -> Result<Self> {
                match row {
                    Row::Postgres(r) => r
                        .try_get::<_, $t>(i)
                        .map_err(|e| unexpected(what).with_source(e)),
                    #[cfg(feature = "sqlx")]
                    Row::Sqlx(r) => sqlx::Row::try_get::<$t, _>(r, i)
                        .map_err(|e| unexpected(what).with_source(e)),
                }
            }
        }
    )*};
}

columns!(
    bool,
    i32,
    i64,
    String,
    Vec<u8>,
    Option<Vec<u8>>,
    Option<i32>,
    Option<i64>,
    Option<Vec<i64>>
);

impl Row {
    /// Column `i`, or a protocol error naming `what` (made only then).
    pub(crate) fn get<T: Column>(&self, i: usize, what: &dyn Fn() -> String) -> Result<T> {
        T::read(self, i, what)
    }
}
