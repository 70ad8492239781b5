import FoundationEssentials
import Glibc
import EarshotSupport
import EarshotOutputs
import EarshotService

/// The earshotd socket a command of the command line talks to (`earshot status`, `listen`, `subscribe`, `sleep`,
/// `test-alert`): `--socket PATH`, else the socket of the daemon that runs with `--config FILE`, else the
/// `[output] socket` of /etc/earshot/earshotd.conf when it sets one, else the default.
///
/// The runtime directory is /run/earshot (systemd's `RuntimeDirectory=earshot`): `earshotd.service` listens on
/// /run/earshot/earshot.sock, instance `earshotd@NAME` on /run/earshot/NAME/earshot.sock (its unit passes `--socket`).
/// `$EARSHOT_RUNTIME_DIR`, when it holds an absolute path, replaces /run/earshot for the command line alone (the
/// default socket, the instance sockets listed and `--config`'s instance socket): tests set it to a scratch
/// directory; earshotd does not read it.
package struct DaemonSocket: Sendable, Equatable {
    /// Where the path comes from.
    package enum Origin: Sendable, Equatable {
        /// `--socket`.
        case flag
        /// `[output] socket` of this configuration file (or its default, when the file sets none).
        case configuration(file: String)
        /// Instance `earshotd@name`, whose file `--config` named: its unit listens on RUNTIME/NAME/earshot.sock.
        case instance(name: String)
        /// Neither option: RUNTIME/earshot.sock.
        case builtIn
    }

    package var path: String
    package var origin: Origin

    package init(path: String, origin: Origin) {
        self.path = path
        self.origin = origin
    }

    /// The variable that replaces /run/earshot for the command line (tests).
    package static let runtimeDirectoryVariable = "EARSHOT_RUNTIME_DIR"
    /// earshotd's runtime directory under systemd.
    package static let runtimeDirectoryFallback = "/run/earshot"
    /// The socket's file name in a runtime directory.
    package static let socketName = "earshot.sock"

    /// `$EARSHOT_RUNTIME_DIR` when absolute, else /run/earshot; without a trailing slash.
    package static var runtimeDirectory: String {
        guard let value = getenv(runtimeDirectoryVariable).map({ String(cString: $0) }), value.hasPrefix("/"), value.count > 1
        else { return runtimeDirectoryFallback }
        return value.hasSuffix("/") ? String(value.dropLast()) : value
    }

    /// RUNTIME/earshot.sock: `earshotd.service`'s socket.
    package static var defaultPath: String { runtimeDirectory + "/" + socketName }

    /// RUNTIME/NAME/earshot.sock: instance `earshotd@NAME`'s socket.
    package static func instancePath(_ name: String) -> String { runtimeDirectory + "/" + name + "/" + socketName }

    /// The socket for `--socket` (`socket`) or `--config` (`configPath`), which exclude each other (the parser
    /// refuses both). An instance's file (/etc/earshot/NAME.conf, see
    /// `StateDirectory.instance(configurationFile:currentDirectory:)`) gives ``instancePath(_:)``, as its unit
    /// passes `--socket` (the file's `[output] socket` is not used then); another file gives its `[output] socket`,
    /// or ``defaultPath`` when it sets none. Neither option: the `[output] socket` that `defaultConfiguration`
    /// (`earshotd.service`'s file, /etc/earshot/earshotd.conf, which its unit passes as `--config` alone) sets,
    /// else ``defaultPath``; that file is optional here, so one that is missing, unreadable or has a bad line gives
    /// ``defaultPath`` (the command then says whether a daemon listens there).
    /// - Throws: the errors of `DaemonConfiguration.load(path:)` (78) for a `--config` file.
    package static func resolve(
        socket: String?, configPath: String?, currentDirectory: String,
        defaultConfiguration: String = DaemonConfiguration.defaultPath
    ) throws(EarshotError) -> DaemonSocket {
        if let socket { return DaemonSocket(path: socket, origin: .flag) }
        guard let configPath else {
            if let configuration = try? DaemonConfiguration.load(path: defaultConfiguration),
               configuration.locations["output.socket"] != nil {
                return DaemonSocket(path: configuration.output.socketPath, origin: .configuration(file: defaultConfiguration))
            }
            return DaemonSocket(path: defaultPath, origin: .builtIn)
        }
        if let instance = StateDirectory.instance(configurationFile: configPath, currentDirectory: currentDirectory) {
            return DaemonSocket(path: instancePath(instance.name), origin: .instance(name: instance.name))
        }
        let configuration = try DaemonConfiguration.load(path: configPath)
        let path = configuration.locations["output.socket"] != nil ? configuration.output.socketPath : defaultPath
        return DaemonSocket(path: path, origin: .configuration(file: configPath))
    }

    /// The instances whose socket exists in `directory` (each `NAME/earshot.sock` that is a socket), sorted by name.
    package static func instances(in directory: String = runtimeDirectory) -> [(name: String, socket: String)] {
        guard let stream = opendir(directory) else { return [] }
        defer { closedir(stream) }
        return DirectoryNames.read(stream).names.sorted().compactMap { name in
            let socket = directory + "/" + name + "/" + socketName
            return PathKind(path: socket) == .socket ? (name, socket) : nil
        }
    }

    /// The line for a default socket that does not exist while instances run here, or nil when none does: `no
    /// earshotd at /run/earshot/earshot.sock; instances running here: kitchen, nursery (use --socket
    /// /run/earshot/kitchen/earshot.sock, or --config /etc/earshot/kitchen.conf)`.
    package static func missingDefault(path: String, instances: [(name: String, socket: String)]) -> String? {
        guard let first = instances.first else { return nil }
        let names = instances.map(\.name).joined(separator: ", ")
        let here = instances.count == 1 ? "instance running here" : "instances running here"
        return "no earshotd at \(path); \(here): \(names) (use --socket \(first.socket), or --config \(StateDirectory.configurationDirectory)/\(first.name).conf)"
    }
}
