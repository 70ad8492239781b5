import Foundation
import Testing

import Earshot
import EarshotDetection
import EarshotOutputs
import EarshotService
import EarshotTools

@Suite("Lifecycle: systemd/earshotd.service")
struct LifecycleServiceFileTests {
    /// `Key=value` lines of the unit's [Service] section; a key given more than once keeps every value.
    static func serviceSettings(_ unit: String = "earshotd.service") throws -> [String: [String]] {
        let url = TestPaths.packageRoot.appendingPathComponent("systemd/\(unit)")
        let text = try String(contentsOf: url, encoding: .utf8)
        var section = ""
        var settings: [String: [String]] = [:]
        for line in text.split(separator: "\n") {
            if line.hasPrefix("[") { section = String(line) }
            guard section == "[Service]", !line.hasPrefix("#"), let equals = line.firstIndex(of: "=") else { continue }
            settings[String(line[..<equals]), default: []].append(String(line[line.index(after: equals)...]))
        }
        return settings
    }

    @Test("the unit agrees with the daemon's defaults: config path, socket directory, notify protocol")
    func unitMatchesDefaults() throws {
        let settings = try Self.serviceSettings()
        let defaults = DaemonConfiguration()
        #expect(settings["Type"] == ["notify"])
        #expect(settings["NotifyAccess"] == ["main"])
        #expect(settings["ExecStart"] == ["/usr/sbin/earshotd --config \(DaemonConfiguration.defaultPath)"])
        // The socket lives in the directory systemd creates for the service.
        let runtimeDirectory = try #require(settings["RuntimeDirectory"]?.first)
        #expect(defaults.output.socketPath == "/run/\(runtimeDirectory)/earshot.sock")
        #expect(settings["RuntimeDirectoryMode"] == ["0755"])
        // The watchdog is on by default; the unit gives it a timeout.
        #expect(defaults.daemon.watchdog)
        #expect(settings["WatchdogSec"] == ["30"])
        // Bad configuration (78) and usage (64) are not retried.
        #expect(settings["RestartPreventExitStatus"] == ["64 78"])
        #expect(settings["SupplementaryGroups"] == ["audio"])
        // IP only for [mqtt], and only to the loopback and private ranges.
        #expect(settings["RestrictAddressFamilies"] == ["AF_UNIX AF_INET AF_INET6"])
        #expect(settings["IPAddressDeny"] == ["any"])
        #expect(settings["IPAddressAllow"] == ["localhost 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16 169.254.0.0/16 fc00::/7 fe80::/10"])
        // The package's system user (systemd/earshot.sysusers), whose state directory tmpfiles.d makes.
        #expect(settings["User"] == ["earshot"])
        #expect(settings["Group"] == ["earshot"])
        #expect(settings["StateDirectoryMode"] == ["0750"])
        for key in ["NoNewPrivileges", "ProtectHome", "PrivateTmp"] {
            #expect(settings[key] == ["yes"], "\(key)")
        }
        #expect(settings["ProtectSystem"] == ["strict"])
    }

    @Test("the package's sysusers.d and tmpfiles.d files agree with the units' user and state directory")
    func packageAccountFiles() throws {
        let settings = try Self.serviceSettings()
        func lines(_ file: String) throws -> [String] {
            try String(contentsOf: TestPaths.packageRoot.appendingPathComponent("systemd/\(file)"), encoding: .utf8)
                .split(separator: "\n").map(String.init).filter { !$0.hasPrefix("#") }
        }
        #expect(try lines("earshot.sysusers") == [
            "g earshot -", #"u earshot -:earshot "Earshot sound-event detection" /var/lib/earshot /usr/sbin/nologin"#,
            "m earshot audio",
        ])
        let state = try #require(settings["StateDirectory"]?.first)
        #expect(try lines("earshot.tmpfiles") == ["d /var/lib/\(state) 0750 earshot earshot -"])
    }

    @Test("earshotd@.service: the same service as earshotd.service, with the instance's config, socket and state")
    func templateUnit() throws {
        var single = try Self.serviceSettings()
        var template = try Self.serviceSettings("earshotd@.service")
        #expect(template["ExecStart"] == ["/usr/sbin/earshotd --config /etc/earshot/%i.conf --socket /run/earshot/%i/earshot.sock"])
        #expect(template["RuntimeDirectory"] == ["earshot/%i"])
        #expect(template["StateDirectory"] == ["earshot/%i"])
        // The default MQTT node: two instances on one host must not share one (trial 7 #10).
        #expect(template["Environment"] == ["EARSHOT_DEFAULT_NODE=%i"])
        // The instances' runtime directories lie in /run/earshot: stopping the single service must not remove it
        // (trial 13 D10); an instance's own is removed when it stops.
        #expect(single["RuntimeDirectoryPreserve"] == ["yes"])
        #expect(template["RuntimeDirectoryPreserve"] == nil)
        for key in ["ExecStart", "RuntimeDirectory", "StateDirectory", "Environment", "RuntimeDirectoryPreserve"] {
            single[key] = nil
            template[key] = nil
        }
        #expect(template == single)
    }

    @Test("systemd-analyze verify: both units, with ExecStart pointed at the built earshotd, print nothing and exit 0",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze"), "needs systemd-analyze (package systemd)"),
          .needsEarshotdBuilt)
    func unitsVerify() throws {
        let earshotd = try #require(EarshotdRun.executable)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-units-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        for unit in ["earshotd.service", "earshotd@.service"] {
            let text = try String(contentsOf: TestPaths.packageRoot.appendingPathComponent("systemd/\(unit)"), encoding: .utf8)
            try text.replacingOccurrences(of: "/usr/sbin/earshotd", with: earshotd.path)
                .write(to: directory.appendingPathComponent(unit), atomically: true, encoding: .utf8)
        }
        #expect(symlink("earshotd@.service", directory.appendingPathComponent("earshotd@kitchen.service").path) == 0)
        for unit in ["earshotd.service", "earshotd@kitchen.service"] {
            let outcome = try EarshotCLI.runProcess(
                // --man=no: `Documentation=man:earshotd(8)` names a page the package installs (scripts/test-deb reads
                // it there); a checkout has none, and verify would fail on the lookup alone.
                URL(fileURLWithPath: "/usr/bin/systemd-analyze"), ["verify", "--man=no", directory.appendingPathComponent(unit).path], timeout: 60)
            #expect(outcome.status == 0, "\(unit): \(outcome.standardError)")
            #expect(outcome.standardOutput + outcome.standardError == "", "\(unit)")
        }
    }
}
