public import FlareStore
import FlarePostgres
import FlareSQLite

/// Opens the store a `StoreLocation` names: the one place that knows every engine, for `flared` and `flare keys`.
public enum StoreOpener {
    /// - Parameter instance: this process's name on the database server (PostgreSQL's `application_name`).
    public static func open(_ location: StoreLocation, instance: String) throws(StoreError) -> any ShareStore {
        switch location {
        case .sqlite(let path): try SQLiteShareStore(path: path)
        case .postgresql(let url): try PostgresShareStore(url: url, instance: instance)
        }
    }
}
