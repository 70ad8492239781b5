import Foundation
import Testing
import Glibc
import EarshotTools

/// The socket commands on a host where only instances run (`earshotd@NAME`, sockets RUNTIME/NAME/earshot.sock): the
/// missing default socket names the instance sockets there (trial 14 D3), and `--config /etc/earshot/NAME.conf`
/// reaches the instance's socket as `earshot history --config` reads its history. Real earshotd processes listen in
/// a scratch runtime directory, which `$EARSHOT_RUNTIME_DIR` (read by the command line only) puts in place of
/// /run/earshot for the `earshot` processes started here; this test process never sets it.
@Suite("DaemonSocket: which earshotd the socket commands reach")
struct DaemonSocketTests {
    /// A scratch runtime directory with a real earshotd listening in each of `names` (NAME/earshot.sock), started
    /// with a configuration file of its own whose `[output] socket` is that path.
    final class Instances {
        let runtime: URL
        var daemons: [DaemonProcess] = []

        init(_ names: [String]) throws {
            runtime = FileManager.default.temporaryDirectory.appendingPathComponent("earshot-run-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: runtime, withIntermediateDirectories: true)
            for name in names {
                let directory = runtime.appendingPathComponent(name)
                try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
                let lines = ["[output]", "socket = \(socket(name))", "journal = false", "[history]", "enabled = false"]
                try (lines.joined(separator: "\n") + "\n").write(to: config(name), atomically: true, encoding: .utf8)
                let daemon = try DaemonProcess(["--config", config(name).path, "--foreground", "--input", "-"], standardInput: true)
                daemons.append(daemon)
                guard TestWait.until(seconds: 30, { FileManager.default.fileExists(atPath: socket(name)) }) else {
                    throw MosquittoBroker.BrokerError(message: "earshotd \(name) did not listen: \(daemon.errorText)")
                }
            }
        }

        func socket(_ name: String) -> String { runtime.appendingPathComponent(name).appendingPathComponent("earshot.sock").path }
        func config(_ name: String) -> URL { runtime.appendingPathComponent("\(name).conf") }

        /// `earshot ARGUMENTS` with `EARSHOT_RUNTIME_DIR` set to the scratch directory.
        func earshot(_ arguments: [String]) throws -> EarshotCLI.Outcome {
            var environment = ProcessInfo.processInfo.environment
            environment["EARSHOT_RUNTIME_DIR"] = runtime.path
            let executable = try #require(EarshotCLI.executable)
            return try EarshotCLI.runProcess(executable, arguments, in: runtime, environment: environment, timeout: 60)
        }

        /// Ends each daemon (end of its standard input) and removes the directory.
        func stop() {
            for daemon in daemons {
                try? daemon.input.fileHandleForWriting.close()
                #expect(daemon.wait(seconds: 20) == 0, "\(daemon.errorText)")
            }
            try? FileManager.default.removeItem(at: runtime)
        }
    }

    @Test("No default socket, two instances: every socket command names them and the way to reach one, status 69",
          .needsEarshotdBuilt, .needsEarshotBuilt)
    func missingDefaultNamesInstances() throws {
        let instances = try Instances(["kitchen", "nursery"])
        defer { instances.stop() }
        // Neither a directory without a socket nor a file that is no socket is an instance.
        try FileManager.default.createDirectory(at: instances.runtime.appendingPathComponent("garage"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: instances.runtime.appendingPathComponent("attic"), withIntermediateDirectories: true)
        try "".write(toFile: instances.runtime.appendingPathComponent("attic/earshot.sock").path, atomically: false, encoding: .utf8)
        let runtime = instances.runtime.path
        let line = "earshot: no earshotd at \(runtime)/earshot.sock; instances running here: kitchen, nursery (use --socket \(runtime)/kitchen/earshot.sock, or --config /etc/earshot/kitchen.conf)"
        for arguments in [["status"], ["listen"], ["subscribe"], ["sleep", "status"], ["test-alert"], ["status", "--json"]] {
            let outcome = try instances.earshot(arguments)
            #expect(outcome.status == 69, "\(arguments)")
            #expect(outcome.standardOutput == "", "\(arguments)")
            #expect(outcome.errorLines == [line], "\(arguments)")
        }
        // What the line advises works: the instance's socket, or its configuration file.
        let bySocket = try instances.earshot(["status", "--socket", instances.socket("kitchen"), "--json"])
        #expect(bySocket.status == 0, "\(bySocket.standardError)")
        #expect(bySocket.outputLines.first?.hasPrefix(#"{"type":"status","#) == true, "\(bySocket.standardOutput)")
        // /etc/earshot/NAME.conf is earshotd@NAME's: its unit listens on RUNTIME/NAME/earshot.sock (the file is not
        // read, so it need not exist here).
        for file in ["/etc/earshot/nursery.conf", "/etc/earshot/./nursery.conf"] {
            let byInstance = try instances.earshot(["status", "--config", file, "--json"])
            #expect(byInstance.status == 0, "\(file): \(byInstance.standardError)")
            #expect(byInstance.outputLines.first?.hasPrefix(#"{"type":"status","#) == true, "\(byInstance.standardOutput)")
        }
        // Another file: the [output] socket of the daemon started with it.
        let byFile = try instances.earshot(["sleep", "status", "--config", instances.config("kitchen").path])
        #expect(byFile.status == 0, "\(byFile.standardError)")
        #expect(byFile.outputLines == ["no sleep session is running"])

        // One instance: the singular.
        let one = try Instances(["porch"])
        defer { one.stop() }
        let single = try one.earshot(["status"])
        #expect(single.errorLines == ["earshot: no earshotd at \(one.runtime.path)/earshot.sock; instance running here: porch (use --socket \(one.runtime.path)/porch/earshot.sock, or --config /etc/earshot/porch.conf)"])
    }

    @Test("No default socket and no instance: the line as before; a missing instance file's socket says its path",
          .needsEarshotBuilt)
    func nothingRunning() throws {
        let none = try Instances([])
        defer { none.stop() }
        let runtime = none.runtime.path
        let status = try none.earshot(["status"])
        #expect(status.status == 69)
        #expect(status.errorLines == ["earshot: cannot connect to \(runtime)/earshot.sock: No such file or directory (is earshotd running? see systemctl status earshotd)"])
        let instance = try none.earshot(["subscribe", "--config", "/etc/earshot/kitchen.conf"])
        #expect(instance.status == 69)
        #expect(instance.errorLines == ["earshot: cannot connect to \(runtime)/kitchen/earshot.sock: No such file or directory (is earshotd running? see systemctl status earshotd)"])
        // A file that is not there is refused as the daemon refuses it.
        let missing = try none.earshot(["status", "--config", "\(runtime)/none.conf"])
        #expect(missing.status == 78)
        #expect(missing.errorLines == ["earshot: \(runtime)/none.conf: cannot read the configuration file: No such file or directory (check the --config path, or omit --config to run with the built-in defaults)"])
    }

    @Test("DaemonSocket.resolve: --socket as given, an instance's file to /run/earshot/NAME/earshot.sock, else the default")
    func resolve() throws {
        // Run without EARSHOT_RUNTIME_DIR (this test process never sets it).
        #expect(getenv("EARSHOT_RUNTIME_DIR") == nil)
        #expect(try DaemonSocket.resolve(socket: "/tmp/x.sock", configPath: nil, currentDirectory: "/")
            == DaemonSocket(path: "/tmp/x.sock", origin: .flag))
        #expect(try DaemonSocket.resolve(socket: nil, configPath: nil, currentDirectory: "/", defaultConfiguration: "/nonexistent/earshotd.conf")
            == DaemonSocket(path: "/run/earshot/earshot.sock", origin: .builtIn))
        for (file, directory) in [("/etc/earshot/garage.conf", "/"), ("garage.conf", "/etc/earshot"), ("../earshot/garage.conf", "/etc/earshot")] {
            #expect(try DaemonSocket.resolve(socket: nil, configPath: file, currentDirectory: directory)
                == DaemonSocket(path: "/run/earshot/garage/earshot.sock", origin: .instance(name: "garage")), "\(file) in \(directory)")
        }
        #expect(DaemonSocket.missingDefault(path: "/run/earshot/earshot.sock", instances: []) == nil)
    }

    @Test("Neither option: the [output] socket that earshotd.service's file sets, else the default; a missing file or one with a bad line gives the default and no error")
    func defaultConfigurationSocket() throws {
        let directory = try AudioTestFiles.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        func resolve(_ lines: [String]?) throws -> DaemonSocket {
            let file = directory.appendingPathComponent("earshotd.conf")
            try? FileManager.default.removeItem(at: file)
            if let lines { try (lines.joined(separator: "\n") + "\n").write(to: file, atomically: true, encoding: .utf8) }
            return try DaemonSocket.resolve(socket: nil, configPath: nil, currentDirectory: "/", defaultConfiguration: file.path)
        }
        let file = directory.appendingPathComponent("earshotd.conf").path
        #expect(try resolve(["[output]", "socket = /srv/earshot/e.sock"])
            == DaemonSocket(path: "/srv/earshot/e.sock", origin: .configuration(file: file)))
        // The packaged file: every setting commented out.
        #expect(try resolve(["[output]", "# socket = /srv/earshot/e.sock"]) == DaemonSocket(path: "/run/earshot/earshot.sock", origin: .builtIn))
        #expect(try resolve(["[output]", "socket = /srv/earshot/e.sock", "colour = blue"])
            == DaemonSocket(path: "/run/earshot/earshot.sock", origin: .builtIn))
        #expect(try resolve(nil) == DaemonSocket(path: "/run/earshot/earshot.sock", origin: .builtIn))
        // --socket and --config still win over it.
        try (["[output]", "socket = /srv/earshot/e.sock"].joined(separator: "\n") + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        #expect(try DaemonSocket.resolve(socket: "/tmp/x.sock", configPath: nil, currentDirectory: "/", defaultConfiguration: file)
            == DaemonSocket(path: "/tmp/x.sock", origin: .flag))
        #expect(try DaemonSocket.resolve(socket: nil, configPath: "/etc/earshot/garage.conf", currentDirectory: "/", defaultConfiguration: file)
            == DaemonSocket(path: "/run/earshot/garage/earshot.sock", origin: .instance(name: "garage")))
    }
}
