import FoundationEssentials
import Glibc
import Dispatch
internal import CSQLite
import EarshotSupport
import EarshotModel
import EarshotAnalysis
import EarshotDetection

/// One open SQLite database connection (`sqlite3*`), closed in deinit.
///
/// A thin, checked wrapper: every call's result code is tested, and a failure becomes an `SQLiteError` that carries
/// the extended result code and `sqlite3_errmsg`. Statements are prepared per call and finalized at once (the
/// history runs a handful of statements per event, so caching buys nothing).
///
/// - Important: Not thread-safe: one connection belongs to one queue (the history writer's, or a command's thread).
package final class SQLiteDatabase {
    private let handle: OpaquePointer
    /// The path given to `init`.
    package let path: String

    /// How to open the file.
    package enum Mode {
        /// Read and write; the file is created when missing, mode 0600 whatever the umask (the service's
        /// UMask=0077 does the same; a program run by hand has 022): an event history says when a household is home.
        case readWriteCreate
        /// Read only; the file must exist.
        case readOnly
        /// Read only, as a file nothing else writes (SQLite's `immutable=1` URI parameter): no locks and no `-shm`
        /// index, so that a user who may read the file but not create files beside it can read a WAL database that
        /// no connection has open (a WAL database otherwise needs its `-shm` file even to be read).
        /// - Important: Changes another process makes while it is open are not seen, or seen half-made: only for a
        ///   file with no `-wal` beside it (no writer has it open).
        case readOnlyImmutable
    }

    /// Opens `path`, following no symbolic link in it (`SQLITE_OPEN_NOFOLLOW`, SQLite 3.31 and later): the file and
    /// each directory above it must be real, so that a link planted where the database belongs cannot make the
    /// daemon (root, when run by hand) create or write a database elsewhere (trial 13 D1). SQLite opens the `-wal`
    /// and `-shm` files with `O_NOFOLLOW` itself.
    /// - Throws: `SQLiteError` with the code of `sqlite3_open_v2` (e.g. `SQLITE_CANTOPEN` for a missing file in
    ///   `.readOnly` mode or a directory that does not exist, `SQLITE_CANTOPEN_SYMLINK` for a symbolic link in
    ///   `path`: ``SQLiteError/isSymbolicLink``).
    /// The corresponding C function is `sqlite3_open_v2`.
    package init(path: String, mode: Mode) throws(SQLiteError) {
        self.path = path
        var flags = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE | SQLITE_OPEN_NOFOLLOW
        switch mode {
        case .readWriteCreate:
            flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
            // SQLite would create the file with 0644 less the umask; made first here, it keeps 0600, and SQLite
            // gives its -wal and -shm files the database's mode. Made without following a link (not even in the
            // directories above it), so nothing is created elsewhere before SQLite refuses the link. A failure here
            // (no directory, a link) is SQLite's to report.
            _ = SymbolicLinks.createFile(path, mode: 0o600)
        case .readOnly, .readOnlyImmutable: flags |= SQLITE_OPEN_READONLY
        }
        var name = path
        if mode == .readOnlyImmutable {
            // A URI filename: '%', '?' and '#' in the path are escaped; "file://" + an absolute path keeps a path
            // that starts with "//" from being read as an authority.
            flags |= SQLITE_OPEN_URI
            var escaped = ""
            for character in path.unicodeScalars {
                switch character {
                case "%": escaped += "%25"
                case "?": escaped += "%3f"
                case "#": escaped += "%23"
                default: escaped.unicodeScalars.append(character)
                }
            }
            name = (path.hasPrefix("/") ? "file://" : "file:") + escaped + "?immutable=1"
        }
        var pointer: OpaquePointer?
        let code = sqlite3_open_v2(name, &pointer, flags, nil)
        guard code == SQLITE_OK, let pointer else {
            let message = pointer.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(code))
            if let pointer { sqlite3_close_v2(pointer) }
            throw SQLiteError(code: code, message: message, operation: "open")
        }
        handle = pointer
    }

    deinit {
        // Every statement is finalized before its call returns, so close cannot report SQLITE_BUSY here.
        sqlite3_close_v2(handle)
    }

    /// Sets how long a statement waits for another connection's lock before failing with `SQLITE_BUSY`.
    /// The corresponding C function is `sqlite3_busy_timeout`.
    package func setBusyTimeout(milliseconds: Int32) throws(SQLiteError) {
        try check(sqlite3_busy_timeout(handle, milliseconds), "busy_timeout")
    }

    /// Runs one or more statements that return no rows the caller needs.
    /// The corresponding C function is `sqlite3_exec`.
    package func execute(_ sql: String) throws(SQLiteError) {
        var errorText: UnsafeMutablePointer<CChar>?
        let code = sqlite3_exec(handle, sql, nil, nil, &errorText)
        if code != SQLITE_OK {
            let message = errorText.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(handle))
            sqlite3_free(errorText)
            throw SQLiteError(code: sqlite3_extended_errcode(handle) == 0 ? code : sqlite3_extended_errcode(handle),
                              message: message, operation: "exec")
        }
    }

    /// A value to bind to a `?` parameter.
    package enum Value: Equatable {
        case integer(Int64)
        case real(Double)
        case text(String)
        case null
    }

    /// Prepares `sql`, binds `parameters` in order, steps through every row and hands each to `row`.
    /// - Throws: `SQLiteError` from preparing, binding or stepping (e.g. `SQLITE_BUSY` after the busy timeout,
    ///   `SQLITE_FULL`, `SQLITE_READONLY`), or whatever `row` throws, converted by the caller.
    /// The corresponding C functions are `sqlite3_prepare_v2`, `sqlite3_bind_*`, `sqlite3_step` and `sqlite3_finalize`.
    package func run(_ sql: String, _ parameters: [Value] = [], row: ((Row) -> Void)? = nil) throws(SQLiteError) {
        var statement: OpaquePointer?
        try check(sqlite3_prepare_v2(handle, sql, -1, &statement, nil), "prepare")
        guard let statement else { return }  // an empty statement
        defer { sqlite3_finalize(statement) }
        for (offset, value) in parameters.enumerated() {
            let index = Int32(offset + 1)
            let code: Int32
            switch value {
            case .integer(let number): code = sqlite3_bind_int64(statement, index, number)
            case .real(let number): code = sqlite3_bind_double(statement, index, number)
            case .text(let text): code = sqlite3_bind_text(statement, index, text, -1, SQLiteDatabase.transient)
            case .null: code = sqlite3_bind_null(statement, index)
            }
            try check(code, "bind")
        }
        while true {
            let code = sqlite3_step(statement)
            if code == SQLITE_DONE { return }
            guard code == SQLITE_ROW else { try check(code, "step"); return }
            row?(Row(statement: statement))
        }
    }

    /// Rows changed by the last INSERT, UPDATE or DELETE.
    /// The corresponding C function is `sqlite3_changes`.
    package var changes: Int { Int(sqlite3_changes(handle)) }

    /// The rowid of the last INSERT.
    /// The corresponding C function is `sqlite3_last_insert_rowid`.
    package var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    /// The current row of a statement being stepped; valid only inside the `row` closure.
    package struct Row {
        fileprivate let statement: OpaquePointer

        package func integer(_ column: Int32) -> Int64 { sqlite3_column_int64(statement, column) }
        package func real(_ column: Int32) -> Double { sqlite3_column_double(statement, column) }
        package func text(_ column: Int32) -> String {
            guard let pointer = sqlite3_column_text(statement, column) else { return "" }
            return String(cString: pointer)
        }
    }

    /// `SQLITE_TRANSIENT`: SQLite copies bound text before `bind` returns (a C macro Swift cannot import).
    private static let transient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)

    private func check(_ code: Int32, _ operation: String) throws(SQLiteError) {
        guard code != SQLITE_OK else { return }
        let extended = sqlite3_extended_errcode(handle)
        throw SQLiteError(code: extended != 0 ? extended : code, message: String(cString: sqlite3_errmsg(handle)),
                          operation: operation)
    }
}

/// A failed SQLite call: its (extended) result code, SQLite's message and the step that failed.
package struct SQLiteError: Error, Equatable {
    /// The extended result code (`SQLITE_BUSY`, `SQLITE_FULL`, `SQLITE_READONLY_DBMOVED`, ...).
    package var code: Int32
    /// `sqlite3_errmsg` at the time of the failure, e.g. "database is locked".
    package var message: String
    /// "open", "prepare", "bind", "step" or "exec".
    package var operation: String

    /// The primary result code (the low 8 bits of the extended one).
    package var primaryCode: Int32 { code & 0xFF }

    /// True for a lock held by another connection past the busy timeout (`SQLITE_BUSY`, `SQLITE_LOCKED`).
    package var isLocked: Bool { primaryCode == SQLITE_BUSY || primaryCode == SQLITE_LOCKED }
    /// True for a full disk or a database at its size limit (`SQLITE_FULL`).
    package var isFull: Bool { primaryCode == SQLITE_FULL }
    /// True for a read-only file, directory or file system (`SQLITE_READONLY`, or `SQLITE_CANTOPEN` on a read-only
    /// directory where the WAL file cannot be made).
    package var isReadOnly: Bool { primaryCode == SQLITE_READONLY }
    /// True when the file cannot be opened (missing, a directory, no permission, a symbolic link).
    package var isCannotOpen: Bool { primaryCode == SQLITE_CANTOPEN }
    /// True when the path has a symbolic link in it, which ``SQLiteDatabase`` does not follow
    /// (`SQLITE_CANTOPEN_SYMLINK`, a macro Swift does not import: `SQLITE_CANTOPEN | (6 << 8)`).
    package var isSymbolicLink: Bool { code == SQLITE_CANTOPEN | (6 << 8) }
    /// True when the file is not a database (`SQLITE_NOTADB`) or is damaged (`SQLITE_CORRUPT`).
    package var isNotADatabase: Bool { primaryCode == SQLITE_NOTADB || primaryCode == SQLITE_CORRUPT }
    /// True when the file cannot be trusted: not a database, damaged, or an I/O error reading or writing it
    /// (`SQLITE_NOTADB`, `SQLITE_CORRUPT`, `SQLITE_IOERR`).
    package var isDamage: Bool { isNotADatabase || primaryCode == SQLITE_IOERR }
}
