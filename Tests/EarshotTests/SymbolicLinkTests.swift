import Foundation
import Glibc
import Testing

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotSupport
import EarshotTools

/// Trial 13 D1, D4 and D8: whoever may write in the history's directory or the sleep report directory
/// (`/var/lib/earshot` belongs to the service's user; a daemon run by hand as root writes there too) planted
/// symbolic links there, and the daemon created or overwrote files at their targets. Each test plants real links to
/// a file in a directory of root's alone (0700) and checks that the file and that directory are left as they were.
@Suite("Symbolic links: the history, the sleep reports, the session marker, the socket and the clips directory are not written through a planted link (trial 13 D1, D8, audit 14 F1); clips directory mode (D4)", .serialized)
struct SymbolicLinkTests {
    /// A scratch directory holding `rootonly/` (0700) with `victim` (0600, "root-owned important\n"): what a planted
    /// link points at.
    struct Scratch {
        let path: String
        var victims: String { path + "/rootonly" }
        var victim: String { victims + "/victim" }
        static let victimText = "root-owned important\n"

        init() throws {
            path = FileManager.default.temporaryDirectory
                .appendingPathComponent("earshot-links-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
            try FileManager.default.createDirectory(atPath: victims, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            try Self.victimText.write(toFile: victim, atomically: false, encoding: .utf8)
            #expect(chmod(victim, 0o600) == 0)
        }

        func remove() { try? FileManager.default.removeItem(atPath: path) }

        /// A new directory `name` in the scratch directory, mode `mode`.
        func directory(_ name: String, mode: mode_t = 0o755) throws -> String {
            let directory = path + "/" + name
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
            #expect(chmod(directory, mode) == 0)
            return directory
        }

        /// `rootonly/` as it must stay: only `victim`, holding its text, mode 0600, one link.
        func expectVictimsUntouched(sourceLocation: SourceLocation = #_sourceLocation) {
            #expect(SymbolicLinkTests.names(victims) == ["victim"], sourceLocation: sourceLocation)
            #expect((try? String(contentsOfFile: victim, encoding: .utf8)) == Self.victimText, sourceLocation: sourceLocation)
            var status = stat()
            #expect(lstat(victim, &status) == 0 && status.st_mode & 0o7777 == 0o600 && status.st_nlink == 1,
                    sourceLocation: sourceLocation)
        }
    }

    /// Names in `directory` (hidden ones too), sorted.
    static func names(_ directory: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted()
    }

    /// `lstat`'s kind and permission bits of `path`, e.g. `S_IFREG | 0o600`; nil when there is nothing.
    static func mode(_ path: String) -> mode_t? {
        var status = stat()
        return lstat(path, &status) == 0 ? status.st_mode & (S_IFMT | 0o7777) : nil
    }

    /// The SQLiteError of opening `path` in `mode`, nil when it opened.
    static func openError(_ path: String, _ mode: SQLiteDatabase.Mode) -> SQLiteError? {
        do {
            _ = try SQLiteDatabase(path: path, mode: mode)
            return nil
        } catch {
            return error
        }
    }

    /// The writer's line for a link at `path` (in `directory`), as `history_unavailable` carries it.
    static func linkFailure(_ path: String, in directory: String) -> EventHistoryWriter.Report {
        .failing("event history \(path): cannot open: it is a symbolic link, which earshotd does not follow (delete the link, which whoever may write in \(directory) could have planted; to keep the history elsewhere, set [history] path to the real file); events are kept in memory and retried every 30 s")
    }

    // MARK: D1 (a): the history

    @Test("SQLite opens no link (SQLITE_OPEN_NOFOLLOW): at the file's name or in a directory above it, to write, read or check; nothing is created at the target")
    func sqliteFollowsNoLink() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let state = try scratch.directory("state")
        let fileLink = state + "/history.sqlite3"
        #expect(symlink(scratch.victim, fileLink) == 0)
        let directoryLink = scratch.path + "/linked-state"
        #expect(symlink(scratch.victims, directoryLink) == 0)
        for mode in [SQLiteDatabase.Mode.readWriteCreate, .readOnly, .readOnlyImmutable] {
            for path in [fileLink, directoryLink + "/history.sqlite3", directoryLink + "/victim"] {
                let error = Self.openError(path, mode)
                #expect(error?.isSymbolicLink == true, "\(mode) \(path): \(String(describing: error))")
                #expect(error?.message == "unable to open database file", "\(mode) \(path)")
            }
        }
        // The read-back connection of the writer's checks: nothing is known (not "damaged").
        #expect(EventHistory.check(path: fileLink, rows: nil, quickCheck: true) == .unknown("PRAGMA quick_check: unable to open database file"))
        scratch.expectVictimsUntouched()
        #expect(Self.names(state) == ["history.sqlite3"])
        #expect(Self.mode(fileLink).map { $0 & S_IFMT } == S_IFLNK)

        #expect(SymbolicLinks.first(in: fileLink) == fileLink)
        #expect(SymbolicLinks.first(in: directoryLink + "/history.sqlite3") == directoryLink)
        #expect(SymbolicLinks.first(in: state + "/missing/history.sqlite3") == nil)
        #expect(SymbolicLinks.first(in: scratch.victim) == nil)
        #expect(SymbolicLinks.createFile(directoryLink + "/new", mode: 0o600) == ENOTDIR)
        #expect(SymbolicLinks.createFile(fileLink, mode: 0o600) == EEXIST)
        scratch.expectVictimsUntouched()
        // A real path: made, 0600 whatever the umask allows above it.
        #expect(SymbolicLinks.createFile(state + "/real.sqlite3", mode: 0o600) == 0)
        #expect(Self.mode(state + "/real.sqlite3") == S_IFREG | 0o600)
    }

    @Test("a link planted at [history] path before the first event: the writer refuses it with one line, creates nothing at its target (missing or a root file) and keeps the events; once it is gone they are stored in a real 0600 file")
    func plantedBeforeStart() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let state = try scratch.directory("state", mode: 0o1777)
        let database = state + "/history.sqlite3"
        #expect(symlink(scratch.victims + "/created-by-root", database) == 0)
        let previous = umask(0o022)
        defer { umask(previous) }
        let reports = ReportLog()
        let writer = EventHistoryWriter(path: database, retentionDays: 0) { reports.append($0) }
        writer.append(HistoryTests.event("smoke_alarm", 0, 5))
        writer.flush()
        #expect(reports.all == [Self.linkFailure(database, in: state)])
        scratch.expectVictimsUntouched()
        // Pointed at the existing root file: it stays as it was (before the fix it became a 16384-byte database).
        #expect(unlink(database) == 0 && symlink(scratch.victim, database) == 0)
        writer.append(HistoryTests.event("baby_cry", 60, 7))
        writer.flush()
        #expect(reports.all.count == 1)
        scratch.expectVictimsUntouched()
        #expect(writer.statistics == EventHistoryWriter.Statistics(written: 0, dropped: 0, backlog: 2, pruned: 0, failing: true))

        #expect(unlink(database) == 0)
        writer.append(HistoryTests.event("glass_break", 120, 1))
        writer.flush()
        #expect(reports.all.last == .recovered("event history \(database) is writable again (no events were lost)"))
        writer.close()
        #expect(Self.mode(database) == S_IFREG | 0o600)
        #expect(try EventHistory(path: database, access: .readOnly).events().map(\.group) == ["smoke_alarm", "baby_cry", "glass_break"])
        scratch.expectVictimsUntouched()
    }

    @Test("a link put in the open history's place (deleted and linked, or moved aside and linked back to itself): refused at the next write, nothing created at the target, the events kept")
    func swappedWhileOpen() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let state = try scratch.directory("state")
        let database = state + "/h.sqlite3"
        let reports = ReportLog()
        let writer = EventHistoryWriter(path: database, retentionDays: 0) { reports.append($0) }
        writer.append(HistoryTests.event("smoke_alarm", 0, 5))
        writer.flush()
        #expect(reports.all.isEmpty)

        // The README's "delete the file", then a link to a new file in root's directory (trial 13's made-by-root).
        for suffix in ["", "-wal", "-shm"] { unlink(database + suffix) }
        #expect(symlink(scratch.victims + "/made-by-root", database) == 0)
        writer.append(HistoryTests.event("baby_cry", 60, 7))
        writer.flush()
        #expect(reports.all == [Self.linkFailure(database, in: state)])
        scratch.expectVictimsUntouched()

        // Gone again: a new file, the waiting event stored.
        #expect(unlink(database) == 0)
        writer.append(HistoryTests.event("glass_break", 120, 1))
        writer.flush()
        #expect(reports.all.count == 2)
        #expect(reports.all.last == .recovered("event history \(database) is writable again (no events were lost)"))

        // Moved aside and linked back: the same file behind the link, yet a link, refused (lstat, not stat).
        for suffix in ["", "-wal", "-shm"] where Self.mode(database + suffix) != nil {
            #expect(rename(database + suffix, state + "/old.sqlite3" + suffix) == 0)
        }
        #expect(symlink(state + "/old.sqlite3", database) == 0)
        writer.append(HistoryTests.event("snoring", 180, 10))
        writer.flush()
        #expect(reports.all.count == 3)
        #expect(reports.all.last == Self.linkFailure(database, in: state))
        #expect(writer.statistics.backlog == 1 && writer.statistics.failing)
        writer.close()
        // The moved file got nothing through the link.
        #expect(try EventHistory(path: state + "/old.sqlite3", access: .readOnly).events().map(\.group) == ["baby_cry", "glass_break"])
        scratch.expectVictimsUntouched()
    }

    @Test("earshot history and earshotd refuse a link in the history's path with one line naming it and the fix: 66 for the reader, 78 at start and in --check-config",
          .needsEarshotBuilt, .needsEarshotdBuilt)
    func commandsRefuseLinks() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let state = try scratch.directory("state")
        let link = state + "/history.sqlite3"
        #expect(symlink(scratch.victim, link) == 0)
        let directoryLink = scratch.path + "/linked-state"
        #expect(symlink(state, directoryLink) == 0)

        let reader = try #require(try EarshotCLI.run(["history", "--db", link], in: URL(fileURLWithPath: scratch.path)))
        #expect(reader.status == 66)
        #expect(reader.standardOutput.isEmpty)
        #expect(reader.errorLines == ["earshot: event history \(link): cannot read: it is a symbolic link, which earshot history does not follow (give the real file with --db)"])
        let below = try #require(try EarshotCLI.run(["history", "--db", directoryLink + "/h.sqlite3"], in: URL(fileURLWithPath: scratch.path)))
        #expect(below.status == 66)
        #expect(below.errorLines == ["earshot: event history \(directoryLink)/h.sqlite3: cannot read: \(directoryLink) is a symbolic link, which earshot history does not follow (give the path without links with --db: realpath \(directoryLink) shows where it leads)"])

        let configuration = try DaemonConfiguration.parse("[history]\npath = \(directoryLink)/h.sqlite3\n", source: "t.conf")
        #expect(throws: EarshotError(.config, "t.conf:2: [history] path = \(directoryLink)/h.sqlite3: \(directoryLink) is a symbolic link, which earshotd does not follow (set [history] path to the path without links: realpath \(directoryLink) shows where it leads)")) {
            try configuration.checkStoragePaths()
        }
        // Off: not opened, not checked.
        try DaemonConfiguration.parse("[history]\nenabled = false\npath = \(link)\n", source: "t.conf").checkStoragePaths()

        let config = scratch.path + "/earshotd.conf"
        try "[detection]\nwatch = smoke_alarm\n[history]\npath = \(link)\n".write(toFile: config, atomically: true, encoding: .utf8)
        let line = "earshotd: \(config):4: [history] path = \(link): is a symbolic link, which earshotd does not follow (delete the link, which whoever may write in \(state) could have planted; to keep the history elsewhere, set [history] path to the real file)\n"
        try StoragePathTests.expectRefused(config: config, socket: scratch.path + "/s.sock", line: line)
        scratch.expectVictimsUntouched()
    }

    // MARK: D1 (b): sleep reports and the session marker

    @Test("sleep reports follow no link: links at the reports' names and at the old predictable staging names leave their target as it was; the reports are regular files 0600 under umask 022")
    func reportsFollowNoLink() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let reports = try scratch.directory("sleep", mode: 0o1777)
        let paths = (json: reports + "/snore-20261207-1004.json", svg: reports + "/snore-20261207-1004.svg")
        let staging = reports + "/.snore-20261207-1004.svg.tmp-\(getpid())"  // the name used before: minute and PID
        #expect(symlink(scratch.victim, paths.json) == 0)
        #expect(symlink(scratch.victim, staging) == 0)
        // Another user's FIFO at a name: replaced, never opened (its reader would get the report).
        #expect(mkfifo(paths.svg, 0o666) == 0 && chown(paths.svg, 65534, 65534) == 0)
        let previous = umask(0o022)
        defer { umask(previous) }
        try SleepService.write(json: ["type": "snore_report"], svg: "<svg/>\n", to: paths, directory: reports)
        scratch.expectVictimsUntouched()
        #expect(Self.mode(paths.json) == S_IFREG | 0o600)
        #expect(Self.mode(paths.svg) == S_IFREG | 0o600)
        #expect(try String(contentsOfFile: paths.json, encoding: .utf8) == #"{"type":"snore_report"}"# + "\n")
        #expect(try String(contentsOfFile: paths.svg, encoding: .utf8) == "<svg/>\n")
        // The planted staging link is left as it was; no staging file is left behind.
        #expect(Self.names(reports) == [".snore-20261207-1004.svg.tmp-\(getpid())", "snore-20261207-1004.json", "snore-20261207-1004.svg"])
        #expect(Self.mode(staging).map { $0 & S_IFMT } == S_IFLNK)

        // A directory at the name: one line, as before.
        let directory = reports + "/snore-20261207-1005.json"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false)
        #expect(throws: EarshotError(.cannotCreate, "cannot write the sleep report \(directory): Is a directory (check free space and that [sleep] report_dir is writable)", cause: "Is a directory")) {
            try SleepService.write(json: [:], svg: "", to: (directory, reports + "/snore-20261207-1005.svg"), directory: reports)
        }
        #expect(Self.names(reports).filter { $0.contains(".tmp-") } == [".snore-20261207-1004.svg.tmp-\(getpid())"])
    }

    @Test("the session marker follows no link: written as a regular file 0600 in place of a planted link, the target untouched; a marker that is a link is not read at the next start (one line) and is removed",
          .needsEarshotBuilt, .needsEarshotdBuilt)
    func markerFollowsNoLink() throws {
        let sandbox = try DaemonEndToEndTests.Sandbox()
        defer { sandbox.remove() }
        let scratch = try Scratch()
        defer { scratch.remove() }
        let (reports, config, wav) = try SleepEdgeTests.snoringDaemonFiles(in: sandbox)
        #expect(chmod(reports, 0o1777) == 0)
        let marker = reports + "/" + SleepService.markerName
        let previous = umask(0o022)
        let first = try SleepEdgeTests.Daemon(config: config, input: wav.path, socket: sandbox.socket, home: sandbox.home)
        umask(previous)
        #expect(first.waitFor(#""state":"capture_live""#))
        #expect(symlink(scratch.victim, marker) == 0)
        let started = try SleepEdgeTests.sleep(["start"], socket: sandbox.socket)
        #expect(started.status == 0, "\(started.errorLines)")
        #expect(started.errorLines.isEmpty)
        scratch.expectVictimsUntouched()
        #expect(Self.mode(marker) == S_IFREG | 0o600)
        #expect(try String(contentsOfFile: marker, encoding: .utf8).hasPrefix(#"{"start":""#))
        try SleepEdgeTests.waitForSessionAudio(socket: sandbox.socket)
        let firstResult = first.stop()
        #expect(firstResult.status == 0)
        // The stop wrote the report and noted the end in the marker: all regular files 0600.
        let written = Self.names(reports)
        #expect(written.count == 3 && written.first == SleepService.markerName, "\(written)")
        for name in written { #expect(Self.mode(reports + "/" + name) == S_IFREG | 0o600, "\(name)") }
        scratch.expectVictimsUntouched()

        // A link at the marker's name to a file that reads as a marker (root's): not read, not resumed.
        let planted = scratch.victims + "/marker.json"
        let text = #"{"start":"2026-12-07T01:00:00.000Z","end":"2026-12-07T02:00:00.000Z","report":"/nowhere"}"# + "\n"
        try text.write(toFile: planted, atomically: false, encoding: .utf8)
        #expect(chmod(planted, 0o600) == 0)
        #expect(unlink(marker) == 0 && symlink(planted, marker) == 0)
        let second = try SleepEdgeTests.Daemon(config: config, input: wav.path, socket: sandbox.socket, home: sandbox.home)
        #expect(second.waitFor(#""state":"capture_live""#))
        #expect(try SleepEdgeTests.sleep(["status"], socket: sandbox.socket).outputLines == ["no sleep session is running"])
        let secondResult = second.stop()
        #expect(secondResult.status == 0)
        #expect(secondResult.err.split(separator: "\n").filter { $0.contains("marker") } == [
            "earshotd: ignoring the sleep session marker \(marker): it is a symbolic link, which earshotd does not follow; no session is resumed",
        ])
        #expect(!secondResult.out.contains("sleep_session_resumed"))
        #expect(Self.mode(marker) == nil)
        #expect(try String(contentsOfFile: planted, encoding: .utf8) == text)
    }

    // MARK: D8: the socket

    @Test("a link at the socket path is named as one (not \"a regular file\", nor missing when it dangles): --check-config and the start 78, the server 73; its target untouched")
    func socketLink() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        for target in [scratch.victim, scratch.path + "/nothing"] {
            let socket = scratch.path + "/e.sock"
            unlink(socket)
            #expect(symlink(target, socket) == 0)
            let configuration = try DaemonConfiguration.parse("[output]\nsocket = \(socket)\n", source: "t.conf")
            #expect(throws: EarshotError(.config, "t.conf:2: [output] socket = \(socket): is a symbolic link, not a socket (delete the link, which whoever may write in \(scratch.path) could have planted, or choose another socket path)")) {
                try configuration.checkStoragePaths()
            }
            #expect(throws: EarshotError(.cannotCreate, "cannot create socket \(socket): a symbolic link is in the way (remove it or choose another --socket)")) {
                _ = try SocketTestSupport.server(socket)
            }
            #expect(Self.mode(socket).map { $0 & S_IFMT } == S_IFLNK)
        }
        scratch.expectVictimsUntouched()
    }

    // MARK: D4: the clips directory

    @Test("an existing clips directory that lets others in (0755) is made 0700 at start, with one warning; clips are saved there as usual")
    func clipsDirectoryTightened() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let clips = try scratch.directory("clips", mode: 0o755)
        var settings = DaemonConfiguration.Clips()
        settings.directory = clips
        let log = ClipWriterLog()
        let writer = ClipWriter(settings: settings, now: { ClipTests.evening }, report: log.report, saved: log.save)
        writer.save(ClipTests.clip("smoke_alarm", seconds: 1))
        writer.close()
        #expect(log.reports == [.warning("clips directory \(clips) was mode 0755, which lets other users list the clips (when events happened, and of which group): made it 0700")])
        #expect(Self.mode(clips) == S_IFDIR | 0o700)
        #expect(Self.names(clips) == ["2026-11-30T21-15-03Z_smoke_alarm.wav"])

        // Already 0700 (or tighter): nothing said.
        let quiet = ClipWriterLog()
        let again = ClipWriter(settings: settings, now: { ClipTests.evening }, report: quiet.report, saved: quiet.save)
        again.close()
        #expect(quiet.reports.isEmpty)
    }

    @Test("a clips directory that cannot be made 0700 (immutable): the warning says why and the chmod to run",
          .enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/chattr"), "needs root and chattr to make a directory immutable (root may chmod any directory)"))
    func clipsDirectoryNotTightened() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let clips = try scratch.directory("clips", mode: 0o750)
        try SleepEdgeTests.chattr("+i", clips)
        defer { try? SleepEdgeTests.chattr("-i", clips) }
        var settings = DaemonConfiguration.Clips()
        settings.directory = clips
        let log = ClipWriterLog()
        let writer = ClipWriter(settings: settings, now: { ClipTests.evening }, report: log.report, saved: log.save)
        writer.flush()
        #expect(log.reports.first == .warning("clips directory \(clips) is mode 0750, which lets other users list the clips (when events happened, and of which group), and cannot be made 0700: Operation not permitted (chmod 0700 \(clips))"))
        #expect(Self.mode(clips) == S_IFDIR | 0o750)
        writer.close()
    }

    // MARK: Audit 14 F1: links at the clips directory and the report directory

    @Test("a link at [clips] directory or [sleep] report_dir, or in a directory above one: checkStoragePaths, earshotd --check-config and the start refuse it with one line naming it and the fix (78); the target's mode and names are left as they were",
          .needsEarshotdBuilt)
    func storageDirectoryLinksRefused() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let target = try scratch.directory("target", mode: 0o755)
        let state = try scratch.directory("state")
        let clips = state + "/clips"
        let reports = state + "/sleep"
        #expect(symlink(target, clips) == 0 && symlink(target, reports) == 0)
        let linkedState = scratch.path + "/linked-state"
        #expect(symlink(state, linkedState) == 0)

        let clipsLine = "[clips] directory = \(clips): is a symbolic link, which earshotd does not follow (delete the link, which whoever may write in \(state) could have planted; to keep the clips elsewhere, set [clips] directory to the real directory)"
        let clipsConfiguration = try DaemonConfiguration.parse("[clips]\nenabled = true\ndirectory = \(clips)\n", source: "t.conf")
        #expect(throws: EarshotError(.config, "t.conf:3: " + clipsLine)) { try clipsConfiguration.checkStoragePaths() }
        let clipsBelow = try DaemonConfiguration.parse("[clips]\nenabled = true\ndirectory = \(linkedState)/c\n", source: "t.conf")
        #expect(throws: EarshotError(.config, "t.conf:3: [clips] directory = \(linkedState)/c: \(linkedState) is a symbolic link, which earshotd does not follow (set [clips] directory to the path without links: realpath \(linkedState) shows where it leads)")) {
            try clipsBelow.checkStoragePaths()
        }
        // Off: not used, not checked.
        try DaemonConfiguration.parse("[clips]\nenabled = false\ndirectory = \(clips)\n", source: "t.conf").checkStoragePaths()

        let reportsLine = "[sleep] report_dir = \(reports): is a symbolic link, which earshotd does not follow (delete the link, which whoever may write in \(state) could have planted; to keep the sleep reports elsewhere, set [sleep] report_dir to the real directory)"
        let sleepConfiguration = try DaemonConfiguration.parse("[sleep]\nreport_dir = \(reports)\n", source: "t.conf")
        #expect(throws: EarshotError(.config, "t.conf:2: " + reportsLine)) { try sleepConfiguration.checkStoragePaths() }
        let reportsBelow = try DaemonConfiguration.parse("[sleep]\nreport_dir = \(linkedState)/s\n", source: "t.conf")
        #expect(throws: EarshotError(.config, "t.conf:2: [sleep] report_dir = \(linkedState)/s: \(linkedState) is a symbolic link, which earshotd does not follow (set [sleep] report_dir to the path without links: realpath \(linkedState) shows where it leads)")) {
            try reportsBelow.checkStoragePaths()
        }

        let config = scratch.path + "/earshotd.conf"
        try "[detection]\nwatch = smoke_alarm\n[clips]\nenabled = true\ndirectory = \(clips)\n".write(toFile: config, atomically: true, encoding: .utf8)
        try StoragePathTests.expectRefused(config: config, socket: scratch.path + "/s.sock", line: "earshotd: \(config):5: \(clipsLine)\n")
        try "[detection]\nwatch = smoke_alarm\n[sleep]\nreport_dir = \(reports)\n".write(toFile: config, atomically: true, encoding: .utf8)
        try StoragePathTests.expectRefused(config: config, socket: scratch.path + "/s.sock", line: "earshotd: \(config):4: \(reportsLine)\n")
        #expect(Self.mode(target) == S_IFDIR | 0o755)
        #expect(Self.names(target).isEmpty)
        scratch.expectVictimsUntouched()
    }

    // MARK: Audit 15 F3: the report directory is checked only when sleep reports are set up

    @Test("a link above the default [sleep] report_dir stops neither --check-config nor the start when no schedule and no report_dir are set; with either it is refused (78)",
          .needsEarshotdBuilt)
    func unusedReportDirectoryNotRefused() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let real = try scratch.directory("real")
        _ = try scratch.directory("real/state")
        let linked = scratch.path + "/var"
        #expect(symlink(real, linked) == 0)
        let state = linked + "/state"
        let line = "[sleep] report_dir = \(state)/sleep: \(linked) is a symbolic link, which earshotd does not follow (set [sleep] report_dir to the path without links: realpath \(linked) shows where it leads)"

        var unused = try DaemonConfiguration.parse("[history]\nenabled = false\n", source: "t.conf")
        unused.sleep.reportDirectory = state + "/sleep"
        #expect(unused.sleepReportsExpected == false)
        try unused.checkStoragePaths()
        var scheduled = try DaemonConfiguration.parse("[history]\nenabled = false\n[sleep]\nschedule = 22:30-07:00\n", source: "t.conf")
        scheduled.sleep.reportDirectory = state + "/sleep"
        #expect(scheduled.sleepReportsExpected == true)
        #expect(throws: EarshotError(.config, line)) { try scheduled.checkStoragePaths() }

        // The audit's run: $STATE_DIRECTORY through a root-owned link, history off, sleep not set up.
        let config = scratch.path + "/c.conf"
        try "[history]\nenabled = false\n".write(toFile: config, atomically: true, encoding: .utf8)
        let run = try #require(try EarshotdRun.run(["--check-config", "--config", config], environment: ["STATE_DIRECTORY": state]))
        #expect(run.status == 0)
        #expect(run.output == "earshotd: configuration OK (watching smoke_alarm, fire_alarm, co_alarm, baby_cry, glass_break)\n")
        #expect(run.error == "")
        try "[history]\nenabled = false\n[sleep]\nschedule = 22:30-07:00\n".write(toFile: config, atomically: true, encoding: .utf8)
        let refused = try #require(try EarshotdRun.run(["--check-config", "--config", config], environment: ["STATE_DIRECTORY": state]))
        #expect(refused.status == 78)
        #expect(refused.error == "earshotd: " + line + "\n")
        #expect(Self.names(real + "/state").isEmpty)
    }

    @Test("a clips writer whose directory is a link (put there after the start's check): clips_unavailable once with the link and the fix; the target keeps its mode 0755, gets no clip, and an old clip there is not pruned")
    func clipsWriterRefusesLink() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let target = try scratch.directory("target", mode: 0o755)
        // A clip 30 days older than the writer's clock: retention (7 days) would delete it through the link.
        let old = target + "/2026-10-31T21-15-03Z_smoke_alarm.wav"
        try "old clip\n".write(toFile: old, atomically: false, encoding: .utf8)
        let then = timespec(tv_sec: Int(ClipTests.evening.timeIntervalSince1970) - 30 * 86_400, tv_nsec: 0)
        #expect(utimensat(AT_FDCWD, old, [then, then], 0) == 0)
        let state = try scratch.directory("state")
        let clips = state + "/clips"
        #expect(symlink(target, clips) == 0)
        var settings = DaemonConfiguration.Clips()
        settings.directory = clips
        let log = ClipWriterLog()
        let writer = ClipWriter(settings: settings, now: { ClipTests.evening }, report: log.report, saved: log.save)
        writer.save(ClipTests.clip("smoke_alarm", seconds: 1))
        writer.close()
        #expect(log.reports == [.failing("clips cannot be saved: cannot use the clips directory \(clips): it is a symbolic link, which earshotd does not follow (delete the link, which whoever may write in \(state) could have planted; to keep the clips elsewhere, set [clips] directory to the real directory); detection goes on without clips, and clips are tried as they come")])
        #expect(log.saved.isEmpty)
        #expect(Self.mode(target) == S_IFDIR | 0o755)
        #expect(Self.names(target) == ["2026-10-31T21-15-03Z_smoke_alarm.wav"])
        #expect(Self.names(state) == ["clips"])
    }

    @Test("sleep reports are not written into a report directory that is a link, or below one: one line naming it and the fix; the target gets nothing")
    func reportsRefuseLinkedDirectory() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let target = try scratch.directory("target", mode: 0o755)
        let state = try scratch.directory("state")
        let reports = state + "/sleep"
        #expect(symlink(target, reports) == 0)
        let paths = (json: reports + "/snore-20261207-1004.json", svg: reports + "/snore-20261207-1004.svg")
        #expect(throws: EarshotError(.cannotCreate, "cannot write the sleep report in \(reports): it is a symbolic link, which earshotd does not follow (delete the link, which whoever may write in \(state) could have planted; to keep the sleep reports elsewhere, set [sleep] report_dir to the real directory)", cause: "symbolic link")) {
            try SleepService.write(json: ["type": "snore_report"], svg: "<svg/>\n", to: paths, directory: reports)
        }
        let linkedState = scratch.path + "/linked-state"
        #expect(symlink(state, linkedState) == 0)
        let below = linkedState + "/new"
        #expect(throws: EarshotError(.cannotCreate, "cannot write the sleep report in \(below): \(linkedState) is a symbolic link, which earshotd does not follow (set [sleep] report_dir to the path without links: realpath \(linkedState) shows where it leads)", cause: "symbolic link")) {
            try SleepService.write(json: [:], svg: "", to: (below + "/a.json", below + "/a.svg"), directory: below)
        }
        #expect(Self.names(target).isEmpty)
        #expect(Self.names(state) == ["sleep"])
    }

    // MARK: Audit 15 F1: the writes go through the directory opened once

    /// renameat2(2) with RENAME_EXCHANGE (2): swaps two names atomically, as the audit's swap.py did. glibc has it
    /// since 2.28; Swift's Glibc module does not import it, so it is looked up by name.
    static func exchange(_ first: String, _ second: String) -> Int32 {
        typealias RenameAt2 = @convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32
        guard let symbol = dlsym(nil, "renameat2") else { return -1 }
        return unsafeBitCast(symbol, to: RenameAt2.self)(AT_FDCWD, first, AT_FDCWD, second, 2)
    }

    @Test("a clips directory exchanged with a link (renameat2 RENAME_EXCHANGE) after the writer opened it: the clip lands in the directory that was opened, nothing in the link's target; the next open and a ClipWriter refuse the link with one line")
    func clipsDirectorySwappedAfterOpen() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let target = try scratch.directory("target", mode: 0o755)
        let parent = try scratch.directory("parent", mode: 0o777)
        let clips = try scratch.directory("parent/clips", mode: 0o700)
        let link = parent + "/clipslink"
        #expect(symlink(target, link) == 0)
        let clip = ClipTests.clip("baby_cry", seconds: 1)
        let name = ClipFiles.name(stem: ClipFiles.stem(start: clip.wallClockStart, group: "baby_cry"))

        let opened = try ClipDirectory(opening: clips)
        // Whoever may write in the parent swaps the directory and the link between the open and the write.
        #expect(Self.exchange(clips, link) == 0)
        #expect(Self.mode(clips).map { $0 & S_IFMT } == S_IFLNK)
        #expect(try opened.write(clip) == clips + "/" + name)
        #expect(Self.names(target).isEmpty)
        #expect(Self.names(link) == [name])  // the real directory, now at the other name
        #expect(Self.mode(link + "/" + name) == S_IFREG | 0o600)

        let refusal = "cannot use the clips directory \(clips): it is a symbolic link, which earshotd does not follow (delete the link, which whoever may write in \(parent) could have planted; to keep the clips elsewhere, set [clips] directory to the real directory)"
        #expect(throws: EarshotError(.cannotCreate, refusal, cause: "symbolic link")) { try ClipDirectory(opening: clips) }
        var settings = DaemonConfiguration.Clips()
        settings.directory = clips
        let log = ClipWriterLog()
        let writer = ClipWriter(settings: settings, now: { ClipTests.evening }, report: log.report, saved: log.save)
        writer.save(clip)
        writer.close()
        #expect(log.reports == [.failing("clips cannot be saved: \(refusal); detection goes on without clips, and clips are tried as they come")])
        #expect(log.saved.isEmpty)
        #expect(Self.names(target).isEmpty)
        #expect(Self.mode(target) == S_IFDIR | 0o755)
    }

    @Test("a sleep report directory exchanged with a link after it was opened: the report and the marker go into the directory that was opened, nothing into the link's target")
    func reportDirectorySwappedAfterOpen() throws {
        let scratch = try Scratch()
        defer { scratch.remove() }
        let target = try scratch.directory("target", mode: 0o755)
        let parent = try scratch.directory("parent", mode: 0o777)
        let reports = try scratch.directory("parent/sleep", mode: 0o700)
        let link = parent + "/sleeplink"
        #expect(symlink(target, link) == 0)
        let opened = SymbolicLinks.openDirectory(reports)
        #expect(opened >= 0)
        defer { close(opened) }
        #expect(Self.exchange(reports, link) == 0)
        for name in ["snore-20261207-1004.json", SleepService.markerName] {
            try OutputFile.writePrivate(Data("{}\n".utf8), in: opened, name: name, path: reports + "/" + name, what: "the sleep report")
        }
        #expect(Self.names(target).isEmpty)
        #expect(Self.names(link) == [SleepService.markerName, "snore-20261207-1004.json"])
        #expect(Self.mode(link + "/snore-20261207-1004.json") == S_IFREG | 0o600)
        // And the writer's own open refuses the link now at the name.
        #expect(throws: EarshotError(.cannotCreate, "cannot write the sleep report in \(reports): it is a symbolic link, which earshotd does not follow (delete the link, which whoever may write in \(parent) could have planted; to keep the sleep reports elsewhere, set [sleep] report_dir to the real directory)", cause: "symbolic link")) {
            try SleepService.write(json: [:], svg: "", to: (reports + "/a.json", reports + "/a.svg"), directory: reports)
        }
        #expect(Self.names(target).isEmpty)
    }
}
