import Earshot
import EarshotOutputs
import EarshotSupport
import EarshotTools
import Foundation

/// What `earshot status`, `listen`, `sleep` and `test-alert` share: a connection to earshotd's socket, a request and its reply.
enum DaemonRequest {
    /// Parses the options the socket commands have in common, `--socket PATH` or `--config FILE` (``SocketChoice``)
    /// and `--json`; a positional argument goes to `positional`, or is a usage error where that is nil; another flag
    /// goes to `flag` (its name, its inline value, the parser to take the value from), which returns false for one it
    /// does not take (a usage error). `socket` becomes the path chosen
    /// (``DaemonSocket/resolve(socket:configPath:currentDirectory:)``).
    static func parse(_ parser: inout ArgumentParser, socket: inout String, json: inout Bool,
                      positional: ((String) throws(EarshotError) -> Void)? = nil,
                      flag: ((String, String?, inout ArgumentParser) throws(EarshotError) -> Bool)? = nil) throws(EarshotError) {
        var choice = SocketChoice()
        while let item = try parser.next() {
            switch item {
            case .positional(let text):
                guard let positional else { throw parser.unexpected(text) }
                try positional(text)
            case .flag("--json", let inline):
                try parser.noValue(of: "--json", inline)
                json = true
            case .flag(let flag, let inline) where SocketChoice.flags.contains(flag):
                try choice.take(flag, inline, &parser)
            case .flag(let name, let inline):
                guard let flag, try flag(name, inline, &parser) else { throw parser.unknown(name) }
            }
        }
        socket = try choice.resolve()
    }

    /// `--socket PATH` or `--config FILE`: which daemon a socket command talks to (``DaemonSocket``).
    struct SocketChoice {
        static let flags = ["--socket", "--config"]
        var socket: String?
        var configPath: String?

        /// Reads the value of `flag` (one of ``flags``).
        mutating func take(_ flag: String, _ inline: String?, _ parser: inout ArgumentParser) throws(EarshotError) {
            if flag == "--socket" {
                socket = try parser.value(of: "--socket", inline, allowed: "the daemon's socket path", allowEmpty: false)
            } else {
                configPath = try parser.value(of: "--config", inline, allowed: "the daemon's configuration file, e.g. /etc/earshot/kitchen.conf", allowEmpty: false)
            }
        }

        /// The socket path: `--socket`, else the one of the daemon running with `--config`, else the default.
        /// - Throws: a usage error for both options; the configuration file's errors (78).
        func resolve() throws(EarshotError) -> String {
            if socket != nil, configPath != nil {
                throw ArgumentParser.exclusive("--socket", "--config", "give the socket, or the configuration file the daemon runs with")
            }
            return try DaemonSocket.resolve(
                socket: socket, configPath: configPath, currentDirectory: FileManager.default.currentDirectoryPath).path
        }
    }

    /// Connects to `socket` and runs `body` with the connection. A failure to connect, or an error `body` throws,
    /// is printed as one line and becomes the exit status (77 permission, 64 bad path, 69 otherwise).
    static func run(socket: String, _ body: (EventSubscriber) throws(EarshotError) -> Int32) -> Int32 {
        let client: EventSubscriber
        do {
            client = try EventSubscriber(path: socket)
        } catch {
            reportError(error.message)
            return error.exitStatus
        }
        do {
            return try body(client)
        } catch {
            reportError(error.message)
            return error.exitStatus
        }
    }

    /// The `"id"` of the requests the commands send. The daemon's reply to a request carries it back; the lines it
    /// sends of itself never carry one, error notices included (a refused or evicted connection, a group a reload
    /// stopped watching), so an error line is the answer only with this id (audit 13 F8).
    static let requestID = 1

    /// Whether `object` (a line the daemon sent) answers a request with ``requestID``: it carries that id, or, for a
    /// line of a reply type (not an error), no id at all (a daemon older than request ids).
    static func answers(_ object: [String: Any], isError: Bool) -> Bool {
        guard let id = object["id"] else { return !isError }
        return (id as? Int) == requestID
    }

    /// Sends `request` with ``requestID`` and returns its answer: the first line whose `"type"` is one of `types`,
    /// or `error` with that id, with its type. Events, health lines and the daemon's own error notices may come
    /// first (a new client receives every event until it subscribes): they are skipped. When no answer comes
    /// within `timeoutSeconds`, or the connection ends, after such a notice, the last notice is the answer: the
    /// reason (a connection refused or evicted, which the daemon then closes; a daemon older than request ids,
    /// whose error replies carry none). Nil when nothing of the kind came.
    static func reply(to request: JSONObject, on client: EventSubscriber, types: Set<String>,
                      timeoutSeconds: Double = 10) throws(EarshotError) -> (line: String, type: String)? {
        var request = request
        request["id"] = .int(requestID)
        // A daemon that refuses the connection (too many clients) writes its error line and closes at once, so the
        // request may meet a closed socket ("Broken pipe"): the refusal is still waiting to be read, and is the answer.
        var sendError: EarshotError?
        do {
            try client.send(line: request.encoded)
        } catch {
            sendError = error
        }
        var type: String?
        var notice: String?
        let line = try client.nextLine(timeoutSeconds: sendError == nil ? timeoutSeconds : 1) { line in
            guard let object = SubscribeCommand.object(line), let kind = object["type"] as? String else { return false }
            let isError = kind == "error"
            guard isError || types.contains(kind) else { return false }
            guard answers(object, isError: isError) else {
                if isError, object["id"] == nil { notice = line }
                return false
            }
            type = kind
            return true
        }
        guard let line, let type else {
            if let notice { return (notice, "error") }
            if let sendError { throw sendError }
            return nil
        }
        return (line, type)
    }

    /// The options of a socket command that takes no others (`earshot status`, `earshot test-alert`).
    struct SocketOptions {
        var socket = DaemonSocket.defaultPath
        var json = false

        /// `--socket PATH` or `--config FILE`, and `--json`; anything else is a usage error.
        static func parse(_ parser: inout ArgumentParser) throws(EarshotError) -> SocketOptions {
            var options = SocketOptions()
            try DaemonRequest.parse(&parser, socket: &options.socket, json: &options.json)
            return options
        }
    }

    /// A control command's round trip (`earshot sleep`, `earshot test-alert`): sends `request` on `socket`, waits
    /// for a reply of `type` or `error`, and prints it: the line as it came with `json`, an error's message on
    /// standard error, else what `show` makes of the reply (it prints).
    /// - Returns: 0; for an error reply, `errorStatus(message)`; 69 when no reply came within `timeoutSeconds`
    ///   (or the daemon cannot be reached: ``run(socket:_:)``).
    static func command(_ request: JSONObject, replyType type: String, socket: String, json: Bool,
                        timeoutSeconds: Double = 10,
                        show: ([String: Any]) -> Void, errorStatus: (String) -> Int32,
                        replyStatus: ([String: Any]) -> Int32 = { _ in 0 }) -> Int32 {
        run(socket: socket) { client throws(EarshotError) in
            guard let reply = try reply(to: request, on: client, types: [type, "error"], timeoutSeconds: timeoutSeconds) else {
                reportError(noReply("reply", socket: socket, seconds: timeoutSeconds))
                return 69
            }
            let object = (try? JSONSerialization.jsonObject(with: Data(reply.line.utf8))) as? [String: Any] ?? [:]
            if json {
                print(reply.line)
            } else if reply.type == "error" {
                reportError(object["message"] as? String ?? reply.line)
            } else {
                show(object)
            }
            return reply.type == "error" ? errorStatus(object["message"] as? String ?? "") : replyStatus(object)
        }
    }

    /// The line for a request that got no answer within `seconds` (10 by default).
    static func noReply(_ what: String, socket: String, seconds: Double = 10) -> String {
        "no \(what) from earshotd on \(socket) within \(Int(seconds)) s (is it stuck? see journalctl -u earshotd)"
    }
}
