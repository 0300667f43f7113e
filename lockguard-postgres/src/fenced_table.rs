//! Fenced writes to the application's own tables, and the schema's SQL.

use tokio_postgres::types::ToSql;

use lockguard_core::FencingToken;
use lockguard_core::{Error, ErrorKind, Result};

/// The SQL that creates lockguard's tables and functions in `schema` (or
/// brings them up to date), for a database administrator who creates them
/// by hand. Clients create them on first connect when they are missing;
/// nothing in it drops a table. Run it in one transaction (`psql
/// --single-transaction`); over a schema newer than this version it fails
/// (SQLSTATE `LG002`) before it changes anything (see
/// [schema versions](crate#schema-versions)).
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`] for a schema name that is not a lowercase
/// identifier.
///
/// # Examples
///
/// ```
/// let sql = lockguard_postgres::migration_sql("app_locks")?;
/// assert!(sql.contains("CREATE TABLE IF NOT EXISTS app_locks.holders"));
/// # Ok::<(), lockguard_core::Error>(())
/// ```
pub fn migration_sql(schema: &str) -> Result<String> {
    crate::schema::migration_sql(schema)
}

/// A table of the application's whose rows carry the fencing token of
/// their last write, in a `bigint` column (`fence` unless configured).
/// See the [crate docs](crate).
#[derive(Debug, Clone)]
pub struct FencedTable {
    table: String,
    key: String,
    fence: String,
}

/// Quotes an identifier (core's one rule, with this database's quote and
/// length limit).
fn identifier(what: &str, name: &str) -> Result<String> {
    lockguard_core::store::net::sql_identifier(what, name, '"', 63)
}

impl FencedTable {
    /// The table `table` (`name` or `schema.name`, as created: quoted
    /// names are case-sensitive) whose rows are found by the column `key`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for names that cannot be identifiers.
    pub fn new(table: &str, key: &str) -> Result<Self> {
        Ok(Self {
            table: identifier("table", table)?,
            key: identifier("key column", key)?,
            fence: identifier("fence column", "fence")?,
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

    /// The statement that adds the token column to the table (once).
    pub fn add_column_sql(&self) -> String {
        format!(
            "ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} bigint NOT NULL DEFAULT 0",
            self.table, self.fence
        )
    }

    /// The statement [`update`](Self::update) runs for these columns:
    /// `$1` the key, `$2` the token, `$3...` the values. It answers the
    /// row's token before the write (none: no such row) and whether it
    /// wrote.
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
        for (i, c) in columns.iter().enumerate() {
            sets.push(format!("{} = ${}", identifier("column", c)?, i + 3));
        }
        sets.push(format!("{} = $2", self.fence));
        let (t, k, f) = (&self.table, &self.key, &self.fence);
        Ok(format!(
            "WITH current AS (SELECT {f} AS fence FROM {t} WHERE {k} = $1 FOR UPDATE), \
             written AS (UPDATE {t} SET {} WHERE {k} = $1 AND {f} <= $2 RETURNING 1) \
             SELECT (SELECT fence FROM current), (SELECT count(*) FROM written)",
            sets.join(", ")
        ))
    }

    /// Writes `set` (column, value) to the row whose key is `key`, with
    /// `token`, unless a write with a greater token came first; one
    /// statement, one round trip. True when written, false when there is
    /// no such row.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::StaleFencingToken`] when the row was written with a
    /// greater token (a holder whose lease ran out: its write is refused);
    /// the store's errors as for every operation.
    pub async fn update<C>(
        &self,
        client: &C,
        key: &(dyn ToSql + Sync),
        token: FencingToken,
        set: &[(&str, &(dyn ToSql + Sync))],
    ) -> Result<bool>
    where
        C: tokio_postgres::GenericClient + Sync,
    {
        let columns: Vec<&str> = set.iter().map(|(c, _)| *c).collect();
        let sql = self.update_sql(&columns)?;
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![key, &token];
        params.extend(set.iter().map(|(_, v)| *v));
        let what = || format!("fenced update of {}", self.table);
        let row = client
            .query_one(sql.as_str(), &params)
            .await
            .map_err(|e| crate::error::pg_error(e, &what()))?;
        let current: Option<i64> = row.get(0);
        let written: i64 = row.get(1);
        match current {
            None => Ok(false),
            Some(_) if written > 0 => Ok(true),
            Some(newer) => Err(Error::new(
                ErrorKind::StaleFencingToken,
                format!(
                    "{}: the row was written with token {newer}, newer than {token}",
                    what()
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_and_checked() {
        let t = FencedTable::new("shop.Orders", "id").unwrap();
        let sql = t.update_sql(&["status", "paid at"]).unwrap();
        assert!(
            sql.contains(r#"FROM "shop"."Orders" WHERE "id" = $1"#),
            "{sql}"
        );
        assert!(
            sql.contains(r#""status" = $3, "paid at" = $4, "fence" = $2"#),
            "{sql}"
        );
        for bad in ["", "a.b.c", "x\"y", ".t"] {
            assert!(FencedTable::new(bad, "id").unwrap_err().is_invalid_input());
        }
        assert!(t.update_sql(&[]).unwrap_err().is_invalid_input());
        assert!(t.clone().fence_column("").unwrap_err().is_invalid_input());
    }
}
