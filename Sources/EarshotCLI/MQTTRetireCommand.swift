import Earshot
import EarshotOutputs
import EarshotService
import EarshotTools
import Foundation

/// `earshot mqtt-retire [--config FILE] [--node N] [--dry-run]`: empties what a node left retained on its MQTT broker
/// (``MQTTRetirement``). Exit status: 0, 64 usage, 69 broker unreachable (or the connection lost), 75 the node's
/// daemon is connected now, 78 configuration (a bad file, an unreadable password file, credentials refused).
enum MQTTRetireCommand: EarshotCommand {
    static let name = "mqtt-retire"
    static let usage = "usage: earshot mqtt-retire [--config FILE] [--node N] [--dry-run]"
    static let help = """
        \(usage)

        Deletes what a room's earshotd left retained on its MQTT broker, so that Home Assistant removes the room's
        device and entities: the node's discovery configs (DISCOVERY_PREFIX/+/earshot_NODE/#) and its topics
        (TOPIC_PREFIX/NODE/#). It connects as the daemon would (the file's [mqtt] host, port, username,
        password_file and TLS settings), takes every retained message under those two filters until none has come
        for \(MQTTRetirement.quietSeconds) s, empties each (a zero-length retained message) and prints its topic, then a summary.
        Stop the room's daemon first: while it is connected (its availability topic says online) nothing is
        emptied, since it would publish them again.
          --config FILE  the room's configuration file (default \(DaemonConfiguration.defaultPath) when it exists);
                         /etc/earshot/NAME.conf is earshotd@NAME's, whose node is NAME unless [mqtt] node says
                         otherwise
          --node N       the node to retire (default: the file's [mqtt] node, as earshotd takes it)
          --dry-run      list the retained topics, empty nothing

        Exit status: 0; 64 bad usage; 69 when the broker cannot be reached or the connection is lost; 75 when the
        node's daemon is connected (stop it, then run this again); 78 when the configuration cannot be read or the
        broker refuses the credentials.
        """
    static let flags = ["--config", "--node", "--dry-run"]

    /// The status for a node whose daemon is connected now (EX_TEMPFAIL: stop it and try again).
    static let onlineStatus: Int32 = 75

    struct Options {
        var configPath: String?
        var node: String?
        var dryRun = false
    }

    static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> Options {
        var options = Options()
        while let item = try parser.next() {
            switch item {
            case .positional(let text):
                throw parser.unexpected(text)
            case .flag("--config", let inline):
                options.configPath = try parser.value(of: "--config", inline, allowed: "the room's configuration file, e.g. /etc/earshot/garage.conf", allowEmpty: false)
            case .flag("--node", let inline):
                let node = try parser.value(of: "--node", inline, allowed: "a node name, e.g. garage", allowEmpty: false)
                var check = MQTTSettings()
                if let requirement = check.set(key: "node", value: node) {
                    throw EarshotError(.usage, "--node \"\(DisplayText.escaped(node, limit: 80))\" \(requirement)")
                }
                options.node = node
            case .flag("--dry-run", let inline):
                try parser.noValue(of: "--dry-run", inline)
                options.dryRun = true
            case .flag(let flag, _):
                throw parser.unknown(flag)
            }
        }
        return options
    }

    static func execute(_ options: Options) -> Int32 {
        do {
            let settings = try MQTTRetirement.settings(
                configPath: options.configPath, node: options.node, currentDirectory: FileManager.default.currentDirectoryPath)
            let retirement = try MQTTRetirement(settings: settings)
            let collected = try retirement.collect()
            let node = settings.node
            let count = collected.topics.count
            let noun = count == 1 ? "retained topic" : "retained topics"
            if options.dryRun {
                retirement.finish()
                for topic in collected.topics { print(topic) }
                let online = collected.online
                    ? "; node \(node) is online, so mqtt-retire would refuse until its earshotd stops" : ""
                print("\(count) \(noun) of node \(node) on \(retirement.broker) (dry run: nothing emptied\(online))")
                return 0
            }
            if collected.online {
                retirement.finish()
                reportError(onlineRefusal(node: node, availability: retirement.availabilityTopic, broker: retirement.broker,
                                          configPath: options.configPath))
                return onlineStatus
            }
            try retirement.empty(collected.topics)
            retirement.finish()
            for topic in collected.topics { print(topic) }
            let none = count == 0 ? " (none found under \(retirement.filters.joined(separator: " and ")): check --node, or [mqtt] node, topic_prefix and discovery_prefix)" : ""
            print("\(count) \(noun) of node \(node) emptied on \(retirement.broker)\(none)")
            return 0
        } catch {
            reportError(error.message)
            return error.exitStatus
        }
    }

    /// The refusal for a node whose daemon is connected, naming the unit to stop: `earshotd@NAME` for an
    /// instance's file (/etc/earshot/NAME.conf), else `earshotd`.
    static func onlineRefusal(node: String, availability: String, broker: String, configPath: String?) -> String {
        let instance = configPath.flatMap {
            StateDirectory.instance(configurationFile: $0, currentDirectory: FileManager.default.currentDirectoryPath)
        }
        let unit = instance.map { "earshotd@\($0.name)" } ?? "earshotd"
        return "node \(node) is online on \(broker) (\(availability) is \"online\"): its earshotd would publish the topics again; stop it first (e.g. sudo systemctl disable --now \(unit) on the machine it runs on), then run mqtt-retire again"
    }
}
