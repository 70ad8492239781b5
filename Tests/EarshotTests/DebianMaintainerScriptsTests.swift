import Foundation
import Testing

/// The Debian package's maintainer scripts (scripts/deb), run as dpkg runs them for `dpkg --root`: with `DPKG_ROOT`
/// set to a scratch root holding the package's units, real enablement links made by `systemctl --root=ROOT enable`
/// (offline; no running systemd needed), and a real process standing for a daemon started by hand. systemd is never
/// asked under `DPKG_ROOT`, so the branches that need it running (stop on removal, restart after upgrade) are not run
/// here; scripts/test-deb installs the package for real.
@Suite("Debian maintainer scripts: purge disables every instance, a hand-started daemon keeps /run/earshot, an upgrade names it")
struct DebianMaintainerScriptsTests {
    static let scripts = TestPaths.packageRoot.appendingPathComponent("scripts/deb")
    static let systemctl = ["/usr/bin/systemctl", "/bin/systemctl"].first { FileManager.default.isExecutableFile(atPath: $0) }

    /// A scratch root: the package's two units in lib/systemd/system, /run/earshot with an instance's directory,
    /// /var/lib/earshot with an instance's history directory, /etc/earshot with the conffile and an instance's file.
    struct Root {
        let url: URL
        var path: String { url.path }

        init() throws {
            url = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-debroot-\(UUID().uuidString)")
            for directory in ["lib/systemd/system", "usr/sbin", "run/earshot/kitchen", "var/lib/earshot/kitchen", "etc/earshot"] {
                try FileManager.default.createDirectory(at: url.appendingPathComponent(directory), withIntermediateDirectories: true)
            }
            for unit in ["earshotd.service", "earshotd@.service"] {
                try FileManager.default.copyItem(
                    at: TestPaths.packageRoot.appendingPathComponent("systemd/\(unit)"),
                    to: url.appendingPathComponent("lib/systemd/system/\(unit)"))
            }
            try Data("[capture]\n".utf8).write(to: url.appendingPathComponent("etc/earshot/earshotd.conf"))
            try Data("[capture]\n".utf8).write(to: url.appendingPathComponent("var/lib/earshot/kitchen/history.sqlite3"))
        }

        func remove() { try? FileManager.default.removeItem(at: url) }

        func exists(_ relative: String) -> Bool {
            (try? FileManager.default.attributesOfItem(atPath: url.appendingPathComponent(relative).path)) != nil
        }

        /// The symbolic links under etc/systemd/system, relative to it, with their targets, sorted.
        func links() -> [String] {
            let base = url.appendingPathComponent("etc/systemd/system").path
            let found = FileManager.default.enumerator(atPath: base)?.compactMap { $0 as? String } ?? []
            return found.compactMap { relative in
                guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: base + "/" + relative) else { return nil }
                return "\(relative) -> \(target)"
            }.sorted()
        }

        /// Runs scripts/deb/SCRIPT ARGUMENTS with DPKG_ROOT set to this root.
        func run(_ script: String, _ arguments: String...) throws -> EarshotCLI.Outcome {
            let environment = ["DPKG_ROOT": path, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"]
            return try EarshotCLI.runProcess(
                URL(fileURLWithPath: "/bin/sh"), [scripts.appendingPathComponent(script).path] + arguments,
                environment: environment, timeout: 60)
        }

        /// `systemctl --root=ROOT ARGUMENTS` (offline: it edits the links, no manager is asked).
        func systemctl(_ arguments: String...) throws -> EarshotCLI.Outcome {
            let tool = try #require(DebianMaintainerScriptsTests.systemctl)
            return try EarshotCLI.runProcess(URL(fileURLWithPath: tool), ["--root=\(path)"] + arguments, timeout: 60)
        }

        /// Starts a copy of /bin/sleep as ROOT/usr/sbin/earshotd: to the scripts, a daemon started by hand (its
        /// /proc/PID/exe is that path, and `... (deleted)` once the file is replaced or removed, as dpkg does).
        /// With `socket` (an absolute path), a copy of /usr/bin/perl instead, listening on a Unix socket there as
        /// earshotd does on its `--socket`; it returns once the socket listens. Stopped with ``stop(_:)``: SIGKILL,
        /// since it inherits this process's signal mask, in which another test may have blocked SIGTERM.
        func startDaemon(socket: String? = nil) throws -> Process {
            let binary = url.appendingPathComponent("usr/sbin/earshotd")
            try? FileManager.default.removeItem(at: binary)
            try FileManager.default.copyItem(at: URL(fileURLWithPath: socket == nil ? "/bin/sleep" : "/usr/bin/perl"), to: binary)
            let process = Process()
            process.executableURL = binary
            guard let socket else {
                process.arguments = ["600"]
                try process.run()
                return process
            }
            process.arguments = [
                "-MSocket", "-e",
                #"my $s; socket($s, PF_UNIX, SOCK_STREAM, 0) and bind($s, pack_sockaddr_un($ARGV[0])) and listen($s, 1) or die "$ARGV[0]: $!\n"; $| = 1; print "ready\n"; sleep 600"#,
                socket,
            ]
            let output = Pipe()
            process.standardOutput = output
            try process.run()
            // "ready\n" once it listens; end of file when it died (its line is on standard error).
            let ready = String(decoding: output.fileHandleForReading.readData(ofLength: 6), as: UTF8.self)
            #expect(ready == "ready\n")
            return process
        }

        /// Kills a process of ``startDaemon()`` and waits for it.
        func stop(_ process: Process) {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
        }

        /// Replaces ROOT/usr/sbin/earshotd by another file, as dpkg unpacks a new version (rename over it).
        func replaceDaemonBinary() throws {
            let staged = url.appendingPathComponent("usr/sbin/earshotd.dpkg-new")
            try Data("#!/bin/sh\n".utf8).write(to: staged)
            _ = rename(staged.path, url.appendingPathComponent("usr/sbin/earshotd").path)
        }
    }

    @Test("remove keeps the enablement links and deletes /run/earshot; purge removes the links of earshotd.service and every earshotd@NAME (found as links: systemctl refuses the glob), not another unit's; a reinstall shows them disabled (trial 14 D2)",
          .enabled(if: systemctl != nil, "systemctl is not installed: the enablement links cannot be made offline"))
    func purgeDisablesInstances() throws {
        let root = try Root()
        defer { root.remove() }
        let enabled = try root.systemctl("enable", "earshotd.service", "earshotd@kitchen.service", "earshotd@nursery.service")
        #expect(enabled.status == 0, "\(enabled.standardError)")
        // Another package's unit, enabled too: purge leaves it.
        try FileManager.default.createSymbolicLink(
            atPath: root.path + "/etc/systemd/system/multi-user.target.wants/ssh.service", withDestinationPath: "/lib/systemd/system/ssh.service")
        let links = [
            "multi-user.target.wants/earshotd.service -> /lib/systemd/system/earshotd.service",
            "multi-user.target.wants/earshotd@kitchen.service -> /lib/systemd/system/earshotd@.service",
            "multi-user.target.wants/earshotd@nursery.service -> /lib/systemd/system/earshotd@.service",
            "multi-user.target.wants/ssh.service -> /lib/systemd/system/ssh.service",
        ]
        #expect(root.links() == links)

        let prerm = try root.run("prerm", "remove")
        #expect(prerm.status == 0)
        #expect(prerm.standardError == "")
        // dpkg removes the units, then runs postrm remove: the links stay (a reinstall runs what was enabled).
        for unit in ["earshotd.service", "earshotd@.service"] {
            try FileManager.default.removeItem(atPath: root.path + "/lib/systemd/system/" + unit)
        }
        let removed = try root.run("postrm", "remove")
        #expect(removed.status == 0)
        #expect(removed.standardError == "")
        #expect(root.links() == links)
        #expect(!root.exists("run/earshot"))
        #expect(root.exists("etc/earshot/earshotd.conf"))
        #expect(root.exists("var/lib/earshot/kitchen/history.sqlite3"))

        let purged = try root.run("postrm", "purge")
        #expect(purged.status == 0)
        #expect(purged.standardError == "")
        #expect(root.links() == ["multi-user.target.wants/ssh.service -> /lib/systemd/system/ssh.service"])
        #expect(!root.exists("var/lib/earshot"))

        // Reinstalled (the units back), nothing is enabled.
        for unit in ["earshotd.service", "earshotd@.service"] {
            try FileManager.default.copyItem(
                at: TestPaths.packageRoot.appendingPathComponent("systemd/\(unit)"),
                to: root.url.appendingPathComponent("lib/systemd/system/\(unit)"))
        }
        let state = try root.systemctl("is-enabled", "earshotd.service", "earshotd@kitchen.service", "earshotd@nursery.service")
        #expect(state.outputLines == ["disabled", "disabled", "disabled"])
    }

    @Test("remove while a daemon started by hand runs with its socket in /run/earshot leaves the directory for it and says so; once it stopped, purge deletes it (trial 14 D7)")
    func handStartedDaemonKeepsRuntimeDirectory() throws {
        let root = try Root()
        defer { root.remove() }
        let daemon = try root.startDaemon(socket: root.path + "/run/earshot/kitchen/earshotd.sock")
        defer { root.stop(daemon) }
        try FileManager.default.removeItem(atPath: root.path + "/usr/sbin/earshotd")  // dpkg removed the binary
        let removed = try root.run("postrm", "remove")
        #expect(removed.status == 0)
        #expect(removed.errorLines == [
            "earshot: earshotd is still running (PID \(daemon.processIdentifier); not stopped by systemd), so \(root.path)/run/earshot is left for its socket: stop it, then rm -r \(root.path)/run/earshot",
        ])
        #expect(root.exists("run/earshot/kitchen"))

        root.stop(daemon)
        // An instance's file the admin made (README: it stays, with /etc/earshot; audit 15 F5).
        try Data("[capture]\n".utf8).write(to: root.url.appendingPathComponent("etc/earshot/kitchen.conf"))
        let purged = try root.run("postrm", "purge")
        #expect(purged.status == 0)
        #expect(purged.standardError == "")
        #expect(!root.exists("run/earshot"))
        #expect(!root.exists("var/lib/earshot"))
        #expect(root.exists("etc/earshot/earshotd.conf"))  // the conffile is dpkg's to delete, before postrm purge
        #expect(root.exists("etc/earshot/kitchen.conf"))
    }

    @Test("remove while a daemon started by hand runs with its socket elsewhere (a user's own, in $XDG_RUNTIME_DIR), or with no socket, deletes /run/earshot and says nothing (audit 15 F4)",
          arguments: ["elsewhere", "none"])
    func handStartedDaemonElsewhereDoesNotKeepRuntimeDirectory(socket: String) throws {
        let root = try Root()
        defer { root.remove() }
        try FileManager.default.createDirectory(atPath: root.path + "/home/user", withIntermediateDirectories: true)
        let daemon = try root.startDaemon(socket: socket == "none" ? nil : root.path + "/home/user/earshotd.sock")
        defer { root.stop(daemon) }
        try FileManager.default.removeItem(atPath: root.path + "/usr/sbin/earshotd")  // dpkg removed the binary
        let removed = try root.run("postrm", "remove")
        #expect(removed.status == 0)
        #expect(removed.standardError == "")
        #expect(!root.exists("run/earshot"))
        #expect(daemon.isRunning)
    }

    @Test("an upgrade names a daemon started by hand that still runs the replaced binary; a first install and a daemon on the new binary say nothing (trial 14 D1)",
          .enabled(if: geteuid() == 0, "not root: postinst's systemd-tmpfiles gives /var/lib/earshot to the user earshot, which needs root"),
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-sysusers") || FileManager.default.isExecutableFile(atPath: "/bin/systemd-sysusers"),
                   "systemd-sysusers is not installed: postinst would add the user to this machine, not to the scratch root"))
    func upgradeNamesHandStartedDaemon() throws {
        let root = try Root()
        defer { root.remove() }
        for (file, installed) in [("earshot.sysusers", "usr/lib/sysusers.d"), ("earshot.tmpfiles", "usr/lib/tmpfiles.d")] {
            try FileManager.default.createDirectory(at: root.url.appendingPathComponent(installed), withIntermediateDirectories: true)
            try FileManager.default.copyItem(
                at: TestPaths.packageRoot.appendingPathComponent("systemd/\(file)"), to: root.url.appendingPathComponent("\(installed)/earshot.conf"))
        }
        let daemon = try root.startDaemon()
        defer { root.stop(daemon) }

        // Running the binary that is installed: nothing to say, on a first install or an upgrade.
        let first = try root.run("postinst", "configure", "")
        #expect(first.status == 0, "\(first.standardError)")
        #expect(!first.standardError.contains("earshot: earshotd"), "\(first.standardError)")
        let same = try root.run("postinst", "configure", "0.1.0")
        #expect(same.status == 0)
        #expect(!same.standardError.contains("earshot: earshotd"), "\(same.standardError)")

        try root.replaceDaemonBinary()
        let upgraded = try root.run("postinst", "configure", "0.1.0")
        #expect(upgraded.status == 0)
        #expect(upgraded.errorLines.last == "earshot: earshotd (PID \(daemon.processIdentifier)) still runs the replaced binary, version 0.1.0: restart it to run the new version (an upgrade restarts only the units systemd runs)")
        #expect(root.exists("etc/passwd"))
        #expect(root.exists("var/lib/earshot"))
    }
}
