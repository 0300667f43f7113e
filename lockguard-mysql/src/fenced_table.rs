//! Fenced writes to the application's own tables.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use mysql_async::prelude::Queryable;
use mysql_async::{Params, Transaction, Value};

use lockguard_core::FencingToken;
use lockguard_core::{Error, ErrorKind, Result};

use crate::error::mysql_error;

/// A table of the application's whose rows carry the fencing token of
/// their last write, in an integer column (`fence` unless configured): the
/// design's `UPDATE ... WHERE fence <= ?` done right, with the pitfalls of
/// row locks on MySQL checked where lockguard can see them.
///
/// - [`update`](Self::update) writes a row unless a greater token wrote
///   it first, in one statement (one round trip when it writes), and says
///   which it was: written, no such row, or
///   [`ErrorKind::StaleFencingToken`].
/// - [`lock_row`](Self::lock_row) is `SELECT ... FOR UPDATE` of one row,
///   for a read-then-write of the application's own: it takes a
///   [`Transaction`], so the row lock cannot end with the statement, as it
///   does under autocommit.
/// - Both check once, at their first use, that the key column leads a
///   primary or unique index: InnoDB locks every row a locking statement
///   scans, so a lock by an unindexed column locks the whole table. A
///   table without one gets [`ErrorKind::InvalidInput`] saying so, not a
///   table lock.
///
/// ```no_run
/// # async fn demo(pool: mysql_async::Pool, guard: lockguard_core::LockGuard) -> lockguard_core::Result<()> {
/// use lockguard_mysql::FencedTable;
///
/// let orders = FencedTable::new("orders", "id")?;
/// // Once, by hand or in a migration: orders.add_column_sql()
/// let mut conn = pool.get_conn().await.expect("a connection");
/// let written = orders
///     .update(&mut conn, 42u64, guard.fencing_token(), &[("status", "paid".into())])
///     .await?;
/// assert!(written, "no order 42");
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct FencedTable {
    /// Quoted, for statements.
    table: String,
    key: String,
    fence: String,
    /// As given, for the index check and messages.
    names: (String, String),
    checked: Arc<AtomicBool>,
}

/// Quotes an identifier (core's one rule, with this database's quote and
/// length limit).
fn identifier(what: &str, name: &str) -> Result<String> {
    lockguard_core::store::net::sql_identifier(what, name, '`', 64)
}

impl FencedTable {
    /// The table `table` (`name` or `database.name`) whose rows are found
    /// by the column `key`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for names that cannot be identifiers.
    pub fn new(table: &str, key: &str) -> Result<Self> {
        Ok(Self {
            table: identifier("table", table)?,
            key: identifier("key column", key)?,
            fence: identifier("fence column", "fence")?,
            names: (table.to_owned(), key.to_owned()),
            checked: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The column holding the token (default `fence`).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a name that cannot be an identifier.
    pub fn fence_column(mut self, column: &str) -> Result<Self> {
        self.fence = identifier("fence column", column)?;
        Ok(self)
    }

    /// The statement that adds the token column to the table (run once;
    /// MySQL 8 has no `ADD COLUMN IF NOT EXISTS`).
    pub fn add_column_sql(&self) -> String {
        format!(
            "ALTER TABLE {} ADD COLUMN {} BIGINT UNSIGNED NOT NULL DEFAULT 0",
            self.table, self.fence
        )
    }

    /// The statement [`update`](Self::update) runs for these columns: the
    /// values, then the token, the key and the token again. It writes only
    /// where the row's token is not greater.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for no columns, or names that cannot be
    /// identifiers.
    pub fn update_sql(&self, columns: &[&str]) -> Result<String> {
        if columns.is_empty() {
            return Err(Error::invalid("a fenced update needs at least one column"));
        }
        let mut sets = Vec::with_capacity(columns.len() + 1);
        for c in columns {
            sets.push(format!("{} = ?", identifier("column", c)?));
        }
        sets.push(format!("{} = ?", self.fence));
        Ok(format!(
            "UPDATE {} SET {} WHERE {} = ? AND {} <= ?",
            self.table,
            sets.join(", "),
            self.key,
            self.fence
        ))
    }

    /// Writes `set` (column, value) to the row whose key is `key`, with
    /// `token`, unless a write with a greater token came first. True when
    /// written, false when there is no such row. One statement when it
    /// writes; a second reads the row's token when nothing changed, with
    /// its row lock (`FOR UPDATE`: the newest token, also in a REPEATABLE
    /// READ transaction whose snapshot is older). In a transaction of the
    /// caller's (`conn` a [`Transaction`]), the row stays locked until it
    /// ends.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::StaleFencingToken`] when the row was written with a
    /// greater token (a holder whose lease ran out: its write is refused);
    /// [`ErrorKind::InvalidInput`] when the key column leads no primary or
    /// unique index (see the [type's docs](Self)); the server's errors
    /// otherwise.
    pub async fn update<Q, K>(
        &self,
        conn: &mut Q,
        key: K,
        token: FencingToken,
        set: &[(&str, Value)],
    ) -> Result<bool>
    where
        Q: Queryable + Send,
        K: Into<Value>,
    {
        self.check(conn).await?;
        let columns: Vec<&str> = set.iter().map(|(c, _)| *c).collect();
        let sql = self.update_sql(&columns)?;
        let key = key.into();
        let what = || format!("fenced update of {}", self.names.0);
        // A row deleted and written again between the two statements
        // (with a smaller token) is written on the next round.
        for _ in 0..3 {
            let mut params: Vec<Value> = set.iter().map(|(_, v)| v.clone()).collect();
            params.extend([token.get().into(), key.clone(), token.get().into()]);
            let result = conn
                .exec_iter(sql.as_str(), Params::Positional(params))
                .await
                .map_err(|e| mysql_error(e, &what()))?;
            let changed = result.affected_rows();
            result
                .drop_result()
                .await
                .map_err(|e| mysql_error(e, &what()))?;
            if changed > 0 {
                return Ok(true);
            }
            // Nothing changed: no such row, a greater token, or the same
            // values written again with this token. Read with the row's
            // lock, as the update read it: in a REPEATABLE READ transaction
            // a plain read answers from the transaction's snapshot, which
            // may predate the greater token the update saw.
            match self.token_of(conn, key.clone()).await? {
                None => return Ok(false),
                Some(newer) if newer > token => {
                    return Err(Error::new(
                        ErrorKind::StaleFencingToken,
                        format!(
                            "{}: the row was written with token {newer}, newer than {token}",
                            what()
                        ),
                    ));
                }
                Some(same) if same == token => return Ok(true),
                Some(_) => {}
            }
        }
        Err(Error::new(
            ErrorKind::Unavailable,
            format!("{}: the row kept changing under the write", what()),
        ))
    }

    /// Locks the row whose key is `key` until `tx` ends (`SELECT ... FOR
    /// UPDATE`) and answers its token (`None`: no such row), for a
    /// read-then-write of the application's own; write with
    /// [`update`](Self::update) on the same transaction.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] when the key column leads no primary or
    /// unique index; the server's errors otherwise.
    pub async fn lock_row<K>(
        &self,
        tx: &mut Transaction<'_>,
        key: K,
    ) -> Result<Option<FencingToken>>
    where
        K: Into<Value>,
    {
        self.check(tx).await?;
        self.token_of(tx, key.into()).await
    }

    /// The row's token, read with the row's lock (`FOR UPDATE`): the
    /// newest committed token, whatever the transaction's snapshot.
    async fn token_of<Q>(&self, conn: &mut Q, key: Value) -> Result<Option<FencingToken>>
    where
        Q: Queryable + Send,
    {
        let sql = format!(
            "SELECT {} FROM {} WHERE {} = ? FOR UPDATE",
            self.fence, self.table, self.key,
        );
        let row: Option<u64> = conn
            .exec_first(sql.as_str(), Params::Positional(vec![key]))
            .await
            .map_err(|e| mysql_error(e, &format!("reading a row of {}", self.names.0)))?;
        Ok(row.map(FencingToken::new))
    }

    /// Checks, once, that the key column leads a primary or unique index.
    async fn check<Q>(&self, conn: &mut Q) -> Result<()>
    where
        Q: Queryable + Send,
    {
        if self.checked.load(Ordering::Acquire) {
            return Ok(());
        }
        let (table, key) = &self.names;
        let (schema, name) = match table.split_once('.') {
            Some((s, n)) => (Some(s), n),
            None => (None, table.as_str()),
        };
        let found: Option<u8> = conn
            .exec_first(
                "SELECT 1 FROM information_schema.STATISTICS \
                 WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
                 AND COLUMN_NAME = ? AND SEQ_IN_INDEX = 1 AND NON_UNIQUE = 0 LIMIT 1",
                (schema, name, key.as_str()),
            )
            .await
            .map_err(|e| mysql_error(e, &format!("reading the indexes of {table}")))?;
        if found.is_none() {
            return Err(Error::invalid(format!(
                "fenced table {table}: the key column {key:?} leads no primary or unique \
                 index (or the table does not exist); InnoDB would lock every row the \
                 statement scans, the whole table"
            )));
        }
        self.checked.store(true, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_and_checked() {
        let t = FencedTable::new("shop.Orders", "id").unwrap();
        let sql = t.update_sql(&["status", "paid at"]).unwrap();
        assert_eq!(
            sql,
            "UPDATE `shop`.`Orders` SET `status` = ?, `paid at` = ?, `fence` = ? \
             WHERE `id` = ? AND `fence` <= ?"
        );
        for bad in ["", "a.b.c", "x`y", ".t"] {
            assert!(FencedTable::new(bad, "id").unwrap_err().is_invalid_input());
        }
        assert!(t.update_sql(&[]).unwrap_err().is_invalid_input());
        assert!(t.update_sql(&["a`b"]).unwrap_err().is_invalid_input());
        assert!(t.clone().fence_column("").unwrap_err().is_invalid_input());
    }
}
