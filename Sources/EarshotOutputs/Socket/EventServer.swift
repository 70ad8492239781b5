import Dispatch
import FoundationEssentials
import Glibc
import Synchronization
import Dispatch
import EarshotSupport
import EarshotModel
import EarshotAnalysis
import EarshotDetection

/// The daemon's event socket: a Unix stream socket that sends JSON lines to any number of subscribers.
///
/// Server to client, one JSON object per line (see `EventJSON` for the exact fields):
/// - `{"type":"detection",...}` at an onset and `{"type":"detection_end",...}` at an offset, to clients whose group
///   filter includes the event's group;
/// - `{"type":"health",...}` to every client, whatever its filter;
/// - `{"type":"dropped","count":N}` once a client that fell behind has caught up: N lines were dropped for it;
/// - replies to requests: `{"type":"subscribed","groups":[...]}` (or `"groups":"all"`), `{"type":"status",...}`,
///   `{"type":"error","message":"..."}`;
/// - `{"type":"shutdown"}` to every client, as its last line, when the server stops (``stop()``: the daemon exits
///   or restarts). A connection that ends without it was dropped: the daemon crashed or was killed. A client
///   that stops reading still gets it, preceded by `{"type":"dropped","count":N}` for the lines it had not been
///   sent: ``stop()`` waits at most ``shutdownGraceSeconds`` for queued lines, then discards what is left (the
///   kernel's send buffer always keeps ``shutdownReserveBytes`` free for these two lines).
///
/// Client to server, one JSON object per line:
/// - `{"subscribe":["smoke_alarm","baby_cry"]}` sets the client's group filter (an empty list, or `"*"` in it, means
///   every group; a new filter replaces the old). With `Configuration.knownGroups` set, an unknown name is an error
///   (a group that exists but is not watched, listed in `Configuration.unwatchedGroups`, gets how to watch it)
///   and the filter is left as it was. Before any subscribe request a client receives every group.
/// - `{"cmd":NAME}` for a command registered with ``register(commands:handler:)`` (the daemon's `sleep_start`,
///   `sleep_stop`, `sleep_status`) gets the handler's reply object, at once or later (the daemon's `test` waits
///   for the network outputs' results): the queue serves everyone else meanwhile, and the client's own later
///   requests are answered after it, in order.
/// - `{"cmd":"listen"}` (answered `{"type":"listening"}`): the client also gets a `{"type":"window",...}` line per
///   analysis window, whatever its group filter (``publish(window:)``), until it disconnects (`earshot listen`).
/// - `{"status":true}` or `{"cmd":"status"}` asks for a status reply: the daemon's fields (from the `status`
///   closure) followed by `subscribers`, `events_published`, `dropped_lines` (total over all clients),
///   `your_dropped_lines`, `evicted_clients`, `refused_clients` and `time`; or the closure's error reply as it
///   is (a daemon that is still starting says so).
/// - Anything else, malformed JSON, or a line longer than `maxRequestLineBytes` gets an error reply; the client
///   stays connected. Empty lines are ignored.
/// - A request may carry `"id"` (a string of 1 to 64 bytes, or an integer): the reply to it, an error reply
///   included, carries the same `"id"` right after its `type`. Lines the daemon sends of itself never carry one
///   (events, health, and the error notices: a refused or evicted connection, a group a reload stopped watching),
///   so a client that sends an id tells its answer from them. A client that closes its sending side (shutdown `SHUT_WR`) keeps
///   receiving events.
///
/// A slow or stuck client never delays the publisher: each client has an outgoing queue bounded by
/// `clientQueueLimitBytes`; a line that does not fit is dropped for that client and counted (in its `dropped` notice
/// and in the status reply). A client whose queue stays full for `stalledClientSeconds` is disconnected (evicted),
/// so that clients that never read cannot keep their slots.
///
/// Requests are read and parsed on a queue of their own, one batch per client at a time (the client's next bytes
/// are read once its batch is answered): a client writing heavy lines costs that queue, never the publishing one.
///
/// Access: the socket file's mode and group decide who may connect. Each connection's peer credentials
/// (`SO_PEERCRED`) are read at accept: a user may hold at most `maxClientsPerUser` connections; commands that change
/// state (`Configuration.controlCommands`: `sleep_start`, `sleep_stop`, `mute`, `unmute`, `test`) are answered only for the uids in
/// `Configuration.controlUsers` and refused with an error line for anyone else.
///
/// - Important: `publish` may be called from any thread (the analysis queue) and returns at once: the work is handed
///   to the server's own serial queue, where all socket I/O happens through non-blocking calls driven by Dispatch read
///   and write sources. The `status` closure runs on that queue and must be thread-safe. Do not call `stop()` or
///   `statistics` from inside the `status` closure.
package final class EventServer: @unchecked Sendable {
    // @unchecked: every mutable property below is touched only on `queue` (or in deinit, when no block can run).

    /// Where the daemon listens by default (systemd's `RuntimeDirectory=earshot`).
    package static let defaultPath = "/run/earshot/earshot.sock"

    /// The most ``stop()`` waits, in seconds, for the clients' queued lines (ending with the shutdown notice) to be
    /// sent before it closes the connections: 0.5 s, so that a stuck subscriber cannot hold up the daemon's exit.
    package static let shutdownGraceSeconds = 0.5

    /// Room kept free in each client's kernel send buffer (`SO_SNDBUF`, about 208 KiB by default) for the final
    /// `dropped` and `shutdown` lines: a line is not started while the bytes the kernel holds for the client
    /// (`SIOCOUTQ`, counted with the kernel's overhead) come within this of the buffer's size, and each write is at
    /// most ``maxWriteBytes``, so a write that started below the mark cannot fill the buffer. (The kernel takes a
    /// write while the bytes it holds are below `SO_SNDBUF`.)
    static let shutdownReserveBytes = 16 * 1024
    /// The most bytes one `send` hands the kernel.
    static let maxWriteBytes = 4096

    /// The server's settings.
    package struct Configuration: Sendable {
        /// The socket's filesystem path (at most 107 bytes).
        package var path: String
        /// The socket file's permission bits, set with chmod(2) after bind(2): 0o660 lets the owner and the owning
        /// group connect.
        package var mode: UInt32
        /// A group to chown(2) the socket file to, or nil to keep the process's group (systemd's `Group=`).
        package var groupID: UInt32?
        /// The most bytes waiting to be sent to one client; lines beyond it are dropped for that client (256 KiB:
        /// over a thousand event lines). Values below 4096 are raised to 4096 so that any line fits an empty queue.
        package var clientQueueLimitBytes: Int
        /// The longest request line a client may send (64 KiB); a longer one gets an error reply and is ignored.
        package var maxRequestLineBytes: Int
        /// The most clients connected at once (default 64; the daemon's `[output] max_clients`); a client beyond it
        /// gets an error line and is disconnected. Clients that have hung up are released before a newcomer is
        /// refused, so short-lived connections do not keep slots busy.
        package var maxClients: Int
        /// The group names a client may subscribe to (the watch list), or nil to accept any name.
        package var knownGroups: [String]?
        /// Groups that exist but are not watched (presets and `[group.NAME]` sections left out of the watch list),
        /// with ``watchAdvice``: a subscribe request naming one is told how to watch it rather than "unknown group".
        package var unwatchedGroups: UnwatchedGroups
        /// The most connections one user (peer uid) may hold (default 16, the daemon's `[output]
        /// max_clients_per_user`): a newcomer beyond it gets an error line and is disconnected, so one user of the
        /// socket's group cannot lock out the others.
        package var maxClientsPerUser: Int
        /// Seconds a client's outgoing queue may stay full (lines being dropped for it) before it is disconnected
        /// (default 60, `[output] stalled_client_seconds`).
        package var stalledClientSeconds: Double
        /// The uids whose connections may run ``controlCommands`` (default: root and the daemon's own user,
        /// `[output] control_users`).
        package var controlUsers: Set<UInt32>
        /// Commands that change state and need a control user.
        package var controlCommands: Set<String>

        package init(
            path: String = EventServer.defaultPath, mode: UInt32 = 0o660, groupID: UInt32? = nil,
            clientQueueLimitBytes: Int = 256 * 1024, maxRequestLineBytes: Int = 64 * 1024, maxClients: Int = 64,
            knownGroups: [String]? = nil, unwatchedGroups: UnwatchedGroups = UnwatchedGroups(),
            maxClientsPerUser: Int = 16, stalledClientSeconds: Double = 60,
            controlUsers: Set<UInt32> = [0, geteuid()],
            controlCommands: Set<String> = ["sleep_start", "sleep_stop", "mute", "unmute", "test"]
        ) {
            self.maxClientsPerUser = maxClientsPerUser
            self.stalledClientSeconds = stalledClientSeconds
            self.controlUsers = controlUsers
            self.controlCommands = controlCommands
            self.path = path
            self.mode = mode
            self.groupID = groupID
            self.clientQueueLimitBytes = clientQueueLimitBytes
            self.maxRequestLineBytes = maxRequestLineBytes
            self.maxClients = maxClients
            self.knownGroups = knownGroups
            self.unwatchedGroups = unwatchedGroups
        }
    }

    /// Group names that exist but are not watched, and how to watch one.
    package struct UnwatchedGroups: Sendable, Equatable {
        /// The names (e.g. the presets `dog_bark`, `speech` when the watch list leaves them out).
        package var names: [String]
        /// What to do, after "add it to": e.g. `[detection] watch in /etc/earshot/earshotd.conf, then systemctl
        /// reload earshotd` (``DaemonConfiguration/watchAdvice(configPath:)``).
        package var advice: String
        /// Groups a client may subscribe to although they are not watched, each with why, e.g. `snoring` ->
        /// `sleep sessions`: a refused subscribe lists them apart from the watched groups (`watched groups:
        /// baby_cry, loud; also snoring (sleep sessions)`), so that its list of watched groups is the status reply's.
        package var alsoSubscribable: [String: String]

        package init(names: [String] = [], advice: String = "", alsoSubscribable: [String: String] = [:]) {
            self.names = names
            self.advice = advice
            self.alsoSubscribable = alsoSubscribable
        }
    }

    /// Counters, as the status reply reports them.
    package struct Statistics: Sendable, Equatable {
        /// Clients connected now.
        package var subscribers: Int
        /// Clients accepted since start.
        package var subscribersAccepted: Int
        /// Detection and health lines published since start.
        package var eventsPublished: Int
        /// Lines dropped for clients that fell behind, since start, over all clients.
        package var droppedLines: Int
        /// Clients disconnected because their queue stayed full for `stalledClientSeconds`, since start.
        package var evictedClients: Int = 0
        /// Connections refused (the server or the user at its cap), since start.
        package var refusedClients: Int = 0
    }

    /// Returns the daemon's status fields (uptime, device, xruns, windows analysed, ...), or an error reply
    /// (`{"type":"error","message":...}`, e.g. the daemon is still starting), sent as it is; runs on the server queue.
    package typealias StatusProvider = @Sendable () -> JSONObject

    package let configuration: Configuration
    private let statusProvider: StatusProvider
    private let queue = DispatchQueue(label: "earshot.event-server")
    /// Where clients' requests are read and parsed (``readRequests(from:)``), apart from the publishing queue.
    private let requestQueue = DispatchQueue(label: "earshot.event-server.requests", qos: .utility)
    /// The registered command names, read by the request queue's parser.
    private let parsedCommands: Mutex<[String]>
    /// Checks for stalled clients (server queue).
    private var stallTimer: DispatchSourceTimer?
    private let queueKey = DispatchSpecificKey<Bool>()
    private let listenFD: Int32
    /// Identity of the socket file we created, so that stop() never removes another daemon's socket.
    private let socketDevice: UInt64
    private let socketInode: UInt64

    private var listenSource: DispatchSourceRead?
    private var acceptPaused = false
    /// Which groups clients may subscribe to (replaced on reload).
    private var policy: SubscriptionPolicy
    private var clients: [Int: Client] = [:]
    private var nextClientID = 1
    private var stopped = false
    /// The shutdown notice is queued for every client: nothing is sent after it.
    private var shutdownAnnounced = false
    private var stats = Statistics(subscribers: 0, subscribersAccepted: 0, eventsPublished: 0, droppedLines: 0)
    /// Used on the request queue only.
    private var readBuffer = [UInt8](repeating: 0, count: 16 * 1024)
    /// Extra `{"cmd":NAME}` commands and who answers them (`register(commands:handler:)`).
    private var commandNames: [String] = []
    private var commandHandler: CommandHandler?
    /// Clients that sent `{"cmd":"listen"}`, for ``hasListeners`` (written on the queue).
    private let listeners = Atomic<Int>(0)

    /// Creates the socket file and starts accepting clients.
    ///
    /// A socket file left at `path` by a daemon that is gone (nothing accepts connections on it) is removed first.
    /// `commands` and `commandHandler` are ``register(commands:handler:)``'s, known before the socket file appears
    /// (a client that connects the moment it exists is not told its command is unknown).
    ///
    /// - Throws: `EarshotError(.config)` for an empty or too long path; `.cannotCreate` when another process is
    ///   listening on `path` (`cannot listen on PATH: another process is already listening there (is earshotd
    ///   already running? stop it or choose another --socket)`), when `path` exists and is not a
    ///   socket, or its directory is missing or not writable, or another program creates `path` while the socket
    ///   starts; `.system` when socket(2), listen(2), chmod(2), chown(2) or naming the socket fails.
    package init(
        configuration: Configuration, status: @escaping StatusProvider, commands: [String] = [],
        commandHandler: CommandHandler? = nil
    ) throws(EarshotError) {
        self.configuration = configuration
        statusProvider = status
        commandNames = commands
        self.commandHandler = commandHandler
        parsedCommands = Mutex(commands)
        policy = SubscriptionPolicy(knownGroups: configuration.knownGroups, unwatched: configuration.unwatchedGroups)
        let path = configuration.path
        let address = try UnixSocketAddress(path: path)
        try Self.removeStaleSocket(at: path, address: address)

        // The socket is bound, listening and given its mode under a staging name beside `path`, then linked to
        // `path`: a client that sees `path` appear always finds a listening socket (bound at `path` itself there
        // would be a moment between bind(2) and listen(2) when connect(2) gets ECONNREFUSED). Where the staging
        // name would not fit `sun_path`, the socket is bound at `path` and listens at once.
        let staging = Self.stagingPath(for: path)
        let bound = staging ?? path
        var bindAddress = address
        if let staging {
            bindAddress = try UnixSocketAddress(path: staging)
            _ = unlink(staging)  // left by an earlier process with this pid that was killed
        }
        let fd = SocketCall.makeStreamSocket(nonBlocking: true)
        guard fd >= 0 else { throw .posix(.system, "cannot create a Unix socket for \(path)", errno: errno) }
        var info = stat()
        do throws(EarshotError) {
            if bindAddress.withSockaddr({ bind(fd, $0, $1) }) != 0 {
                let code = errno
                let hint = switch code {
                case ENOENT: " (create the directory, run under systemd with RuntimeDirectory=earshot, or choose another --socket)"
                case EACCES, EPERM: " (run as the earshotd service user, or choose another --socket)"
                case EADDRINUSE: " (another program created it just now; stop it or choose another --socket)"
                default: ""
                }
                throw EarshotError(
                    .cannotCreate, "cannot create socket \(path): \(SocketCall.describe(code))\(hint)",
                    cause: SocketCall.describe(code))
            }
            // Until chmod(2) the file has bind's mode (0777 less the umask: with systemd's 0022 only the daemon's
            // user may connect).
            if listen(fd, 64) != 0 {
                let code = errno
                _ = unlink(bound)
                throw EarshotError.posix(.system, "cannot listen on socket \(path)", errno: code)
            }
            if chmod(bound, mode_t(configuration.mode)) != 0 {
                let code = errno
                _ = unlink(bound)
                throw EarshotError.posix(.system, "cannot set the mode of socket \(path)", errno: code)
            }
            if let group = configuration.groupID, chown(bound, uid_t.max, gid_t(group)) != 0 {
                let code = errno
                _ = unlink(bound)
                throw EarshotError.posix(.system, "cannot give socket \(path) to group \(group)", errno: code)
            }
            if let staging {
                try Self.publish(staging: staging, at: path)
            }
            if lstat(path, &info) != 0 {
                let code = errno
                _ = unlink(path)
                throw EarshotError.posix(.system, "cannot stat socket \(path)", errno: code)
            }
        } catch {
            SocketCall.close(fd)
            throw error
        }
        listenFD = fd
        socketDevice = UInt64(info.st_dev)
        socketInode = UInt64(info.st_ino)

        queue.setSpecific(key: queueKey, value: true)
        let source = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        source.setEventHandler { [weak self] in self?.acceptClients() }
        source.setCancelHandler { SocketCall.close(fd) }
        listenSource = source
        source.resume()
        let timer = DispatchSource.makeTimerSource(queue: queue)
        let period = max(0.05, min(5, configuration.stalledClientSeconds / 4))
        timer.schedule(deadline: .now() + period, repeating: period, leeway: .milliseconds(50))
        timer.setEventHandler { [weak self] in self?.evictStalledClients() }
        stallTimer = timer
        timer.resume()
    }

    deinit {
        // Only reached without stop(): no queue block holds `self` now, so the state can be torn down here.
        teardown()
    }

    // MARK: Publishing (any thread)

    /// Sends a detection event to the clients whose filter includes its group. Returns at once.
    ///
    /// - Parameter time: the wall-clock time written in the line's `time` field.
    package func publish(_ event: DetectionEvent, time: Date = Date()) {
        queue.async { [self] in
            guard !stopped else { return }
            broadcast(EventJSON.object(for: event, time: time), group: event.group)
        }
    }

    /// Sends a health change to every client. Returns at once.
    package func publish(_ health: HealthEvent, time: Date = Date()) {
        queue.async { [self] in
            guard !stopped else { return }
            broadcast(EventJSON.object(for: health, time: time), group: nil)
        }
    }

    /// Sends any object as a line: to the clients whose filter includes `group`, or to every client when `group` is
    /// nil. Returns at once.
    package func publish(object: JSONObject, group: String?) {
        queue.async { [self] in
            guard !stopped else { return }
            broadcast(object, group: group)
        }
    }

    /// Whether a client sent `{"cmd":"listen"}` and is still connected: only then are windows worth a line.
    /// Any thread (an atomic load).
    package var hasListeners: Bool { listeners.load(ordering: .relaxed) > 0 }

    /// Queues `object` (a `{"type":"window",...}` line) for the clients that asked to listen, whatever their
    /// group filter; like ``publish(object:group:)``, it returns at once and a slow client loses lines, counted.
    package func publish(window object: JSONObject) {
        queue.async { [self] in
            guard !stopped, !shutdownAnnounced else { return }
            let line = Array((object.encoded + "\n").utf8)
            for client in clients.values where client.listening { enqueue(line, to: client) }
        }
    }

    /// Recounts the listening clients (on the queue, after one starts listening or is dropped).
    private func countListeners() {
        listeners.store(clients.values.filter(\.listening).count, ordering: .relaxed)
    }

    /// Sends the reply object to a registered command: once (later calls are ignored), from any thread.
    package typealias CommandReply = @Sendable (JSONObject) -> Void

    /// Answers a registered command: gets its name, the request's `group` (nil without one), its other members
    /// (``EventRequest/command(_:group:options:)``) and `reply`, which it
    /// calls once with the reply object, before returning or later (a deferred reply: the daemon's test alert waits
    /// for the network outputs' results). Runs on the server's queue; it may wait briefly for another queue, never
    /// for the server's, and never waits for the reply it defers: the queue goes on serving other clients and
    /// publishing meanwhile, and only this client's later requests wait for it (they are answered in order).
    /// - Important: `reply` must be called, or the client gets no further replies.
    package typealias CommandHandler = @Sendable (
        _ command: String, _ group: String?, _ options: JSONObject, _ reply: @escaping CommandReply) -> Void

    /// Adds `{"cmd":NAME}` requests for `commands` (e.g. `sleep_start`), answered with what `handler` replies. A
    /// later call replaces the earlier one.
    package func register(commands: [String], handler: @escaping CommandHandler) {
        onQueue {
            commandNames = commands
            commandHandler = handler
        }
        parsedCommands.withLock { $0 = commands }
    }

    /// Replaces the group names clients may subscribe to (after a configuration reload); nil accepts any name.
    /// Existing filters are kept; a client whose filter names a group no longer known gets
    /// ``lostGroupsNotice(_:advice:)``, so that a script waiting for that group is not left deaf without a word.
    package func setKnownGroups(_ groups: [String]?, unwatched: UnwatchedGroups = UnwatchedGroups()) {
        queue.async { [self] in
            policy = SubscriptionPolicy(knownGroups: groups, unwatched: unwatched)
            guard let groups else { return }
            let known = Set(groups)
            for client in clients.values where !client.isClosed {
                guard let lost = client.filter?.subtracting(known).sorted(), !lost.isEmpty else { continue }
                reply(Self.lostGroupsNotice(lost, advice: unwatched.advice), to: client)
            }
        }
    }

    /// The error line for a client whose filter names groups that a reload stopped watching, e.g.
    /// `{"type":"error","message":"the daemon no longer watches group \"glass_break\" after a reload: this subscription
    /// gets no events of it (to hear it again, add it to [detection] watch in g.conf, then reload earshotd ...)"}`.
    package static func lostGroupsNotice(_ names: [String], advice: String) -> JSONObject {
        let list = names.map { "\"\($0)\"" }.joined(separator: ", ")
        let one = names.count == 1
        let fix = advice.isEmpty ? "" : " (to hear \(one ? "it" : "them") again, add \(one ? "it" : "them") to \(advice))"
        return [
            "type": "error",
            "message": .string(
                "the daemon no longer watches \(one ? "group" : "groups") \(list) after a reload: this subscription gets no events of \(one ? "it" : "them")\(fix)"),
        ]
    }

    /// The counters now. Waits for the server queue.
    package var statistics: Statistics {
        onQueue { () -> Statistics in
            dropHungUpClients()
            var current = stats
            current.subscribers = clients.count
            return current
        }
    }

    /// Sends every client `{"type":"shutdown"}` after its queued lines, waits up to ``shutdownGraceSeconds`` for
    /// them to go out, then disconnects every client, stops listening and removes the socket file (only if it is
    /// still the one this server created). Idempotent; waits for the server queue. Events published afterwards are
    /// ignored.
    package func stop() {
        var pending = onQueue { stopped ? false : announceShutdown() }
        // The write sources run on the server queue, so wait outside it (from inside it there is no waiting).
        if DispatchQueue.getSpecific(key: queueKey) != true {
            let deadline = DispatchTime.now() + Self.shutdownGraceSeconds
            while pending && DispatchTime.now() < deadline {
                usleep(5_000)
                pending = onQueue { clients.values.contains { !$0.isClosed && $0.queuedBytes > 0 } }
            }
        }
        // A client still behind (not reading): its backlog is discarded and counted, and the dropped count and the
        // shutdown notice go into the room kept for them in its send buffer.
        onQueue {
            for client in clients.values where !client.isClosed {
                let discarded = client.discardBacklog(beforeLast: client.noticeChunks)
                guard discarded > 0 else { continue }
                client.replaceNotices(with: Self.shutdownNotices(dropped: client.announcedDropped + discarded))
                flush(client, final: true)
            }
        }
        onQueue { teardown() }
    }

    // MARK: Server queue

    private func onQueue<T>(_ body: () -> T) -> T {
        if DispatchQueue.getSpecific(key: queueKey) == true { return body() }
        return queue.sync(execute: body)
    }

    private func teardown() {
        guard !stopped else { return }
        _ = announceShutdown()  // without stop() (deinit): best effort, what the sockets take at once
        stopped = true
        var info = stat()
        if lstat(configuration.path, &info) == 0, UInt64(info.st_dev) == socketDevice, UInt64(info.st_ino) == socketInode {
            _ = unlink(configuration.path)
        }
        if let source = listenSource {
            if acceptPaused { source.resume() }
            source.cancel()
        }
        listenSource = nil
        stallTimer?.cancel()
        stallTimer = nil
        for client in clients.values { client.close() }
        clients.removeAll()
    }

    private func acceptClients() {
        guard !stopped, let source = listenSource else { return }
        while true {
            // accept4(2) is not visible to Swift (it needs _GNU_SOURCE), so the flags are set with fcntl(2).
            let fd = accept(listenFD, nil, nil)
            if fd < 0 {
                switch errno {
                case EINTR, ECONNABORTED, EPROTO:
                    continue
                case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                    // Out of descriptors: stop polling the listener for a moment instead of spinning on it.
                    if !acceptPaused {
                        acceptPaused = true
                        source.suspend()
                        queue.asyncAfter(deadline: .now() + 0.2) { [weak self] in
                            guard let self, self.acceptPaused, !self.stopped else { return }
                            self.acceptPaused = false
                            self.listenSource?.resume()
                        }
                    }
                    return
                default:
                    return  // EAGAIN: no more pending connections
                }
            }
            let flags = fcntl(fd, F_GETFL)
            guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0, fcntl(fd, F_SETFD, FD_CLOEXEC) == 0 else {
                SocketCall.close(fd)
                continue
            }
            let peer = Self.peerCredentials(fd)
            if let refusal = admit(uid: peer.uid) {
                stats.refusedClients += 1
                let notice: JSONObject = ["type": "error", "message": .string(refusal)]
                let bytes = Array((notice.encoded + "\n").utf8)
                _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT)) }
                SocketCall.close(fd)
                continue
            }
            let client = Client(id: nextClientID, fd: fd, uid: peer.uid, queue: queue, requestQueue: requestQueue)
            nextClientID += 1
            clients[client.id] = client
            stats.subscribersAccepted += 1
            client.readSource?.setEventHandler { [weak self, weak client] in
                guard let self, let client else { return }
                self.readRequests(from: client)
            }
            client.writeSource.setEventHandler { [weak self, weak client] in
                guard let self, let client else { return }
                self.flush(client)
            }
            client.readSource?.resume()
        }
    }

    /// The peer's uid (and pid) from `SO_PEERCRED` (`struct ucred`: pid, uid, gid, 32 bits each on Linux); uid
    /// `UInt32.max` if the kernel does not say (never matches a control user).
    /// The corresponding C function is `getsockopt`.
    private static func peerCredentials(_ fd: Int32) -> (uid: UInt32, pid: Int32) {
        var credentials: (pid: Int32, uid: UInt32, gid: UInt32) = (0, UInt32.max, UInt32.max)
        var length = socklen_t(MemoryLayout<(Int32, UInt32, UInt32)>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0 else { return (UInt32.max, 0) }
        return (credentials.uid, credentials.pid)
    }

    /// Whether a newcomer of `uid` gets a slot: nil if so (a slot was free or was made free), else the refusal line.
    /// Slots of clients that hung up are freed first, then those of stalled clients; with the server still full, the
    /// oldest connection of the user holding the most is closed when that user holds more than the newcomer's would.
    private func admit(uid: UInt32) -> String? {
        var held = clients.values.filter { $0.uid == uid && !$0.isClosed }.count
        if held >= configuration.maxClientsPerUser { dropHungUpClients() }
        held = clients.values.filter { $0.uid == uid && !$0.isClosed }.count
        if held >= configuration.maxClientsPerUser {
            return "too many connections from uid \(uid) (\(held) open, at most \(configuration.maxClientsPerUser) per user); close some, or raise [output] max_clients_per_user"
        }
        // Slots held by clients that have hung up (whose close the read handler has not seen yet, or that shut
        // down their sending side first and are no longer read) are freed before anyone is refused.
        if clients.count >= configuration.maxClients { dropHungUpClients() }
        if clients.count >= configuration.maxClients { evictStalledClients(force: true) }
        if clients.count >= configuration.maxClients {
            var perUser: [UInt32: [Client]] = [:]
            for client in clients.values { perUser[client.uid, default: []].append(client) }
            if let (_, heaviest) = perUser.max(by: { $0.value.count < $1.value.count }), heaviest.count > held + 1,
               let oldest = heaviest.min(by: { $0.id < $1.id })
            {
                reply(Self.error("disconnected to make room for another user (the socket holds at most \(configuration.maxClients) clients)"), to: oldest)
                flush(oldest)
                drop(oldest)
            }
        }
        if clients.count >= configuration.maxClients {
            return "too many subscribers (\(configuration.maxClients) connected, at most \(configuration.maxClients)); try again later, or raise [output] max_clients"
        }
        return nil
    }

    /// Disconnects clients whose queue has stayed full for `stalledClientSeconds` (`force`: any whose queue is full
    /// now, when a newcomer needs the slot).
    private func evictStalledClients(force: Bool = false) {
        let now = DispatchTime.now().uptimeNanoseconds
        let limit = UInt64(configuration.stalledClientSeconds * 1e9)
        for client in clients.values where !client.isClosed {
            guard let since = client.stalledSince else { continue }
            if force || now - since >= limit {
                stats.evictedClients += 1
                drop(client)
            }
        }
    }

    /// Queues `{"type":"shutdown"}` for every client, past the queue limit (it must be the last line; a pending
    /// `dropped` notice goes first), and sends what the sockets take now. Returns whether some client still has
    /// bytes queued. Only the first call does anything.
    private func announceShutdown() -> Bool {
        guard !shutdownAnnounced else { return false }
        shutdownAnnounced = true
        for client in clients.values where !client.isClosed {
            let notices = Self.shutdownNotices(dropped: client.droppedPending)
            client.announcedDropped = client.droppedPending
            client.droppedPending = 0
            client.noticeChunks = notices.count
            for line in notices { client.append(line) }
            if !client.waitingForWritable { flush(client) }
        }
        return clients.values.contains { !$0.isClosed && $0.queuedBytes > 0 }
    }

    /// The last lines of a client: `{"type":"dropped","count":N}` when lines were dropped for it, then
    /// `{"type":"shutdown"}`.
    private static func shutdownNotices(dropped: Int) -> [[UInt8]] {
        let shutdown: JSONObject = ["type": "shutdown"]
        var lines = [Array((shutdown.encoded + "\n").utf8)]
        if dropped > 0 {
            let notice: JSONObject = ["type": "dropped", "count": .int(dropped)]
            lines.insert(Array((notice.encoded + "\n").utf8), at: 0)
        }
        return lines
    }

    /// Drops every client whose peer has closed the connection (`POLLHUP`: both directions shut) but whose close
    /// was not handled yet: a client that shut down its sending side and then closed (its read source is gone, so
    /// only a failed write would notice), or, in a burst of connections, one whose read event has not run yet.
    /// One `poll(2)` over the clients, without waiting. The corresponding C function is `poll`.
    private func dropHungUpClients() {
        let open = clients.values.filter { !$0.isClosed }
        guard !open.isEmpty else { return }
        var entries = open.map { pollfd(fd: $0.fd, events: 0, revents: 0) }
        guard poll(&entries, nfds_t(entries.count), 0) > 0 else { return }  // 0: none; -1 (EINTR...): next time
        for (client, entry) in zip(open, entries) where entry.revents & Int16(POLLHUP | POLLNVAL) != 0 {
            drop(client)
        }
    }

    private func drop(_ client: Client) {
        client.close()
        clients[client.id] = nil
        if client.listening { countListeners() }
    }

    private func broadcast(_ object: JSONObject, group: String?) {
        guard !shutdownAnnounced else { return }
        stats.eventsPublished += 1
        guard !clients.isEmpty else { return }
        let line = Array((object.encoded + "\n").utf8)
        for client in clients.values {
            if let group, let filter = client.filter, !filter.contains(group) { continue }
            enqueue(line, to: client)
        }
    }

    private func enqueue(_ line: [UInt8], to client: Client) {
        guard !client.isClosed, !shutdownAnnounced else { return }
        if client.queuedBytes + line.count > max(4096, configuration.clientQueueLimitBytes) {
            client.droppedPending += 1
            client.droppedTotal += 1
            stats.droppedLines += 1
            if client.stalledSince == nil { client.stalledSince = DispatchTime.now().uptimeNanoseconds }
            return
        }
        client.append(line)
        if !client.waitingForWritable { flush(client) }
    }

    private func reply(_ object: JSONObject, to client: Client) {
        enqueue(Array((object.encoded + "\n").utf8), to: client)
    }

    /// Writes as much of the client's queue as the socket takes; arms the write source when it would block.
    /// Sends what the client's socket takes now. Unless `final` (the shutdown notices after a discarded backlog),
    /// a line is not started while the kernel's send buffer is within ``shutdownReserveBytes`` of full: that room
    /// is kept for the notices.
    private func flush(_ client: Client, final: Bool = false) {
        while !client.isClosed {
            while let (chunk, offset) = client.head {
                if offset == 0, !final, client.sendBufferNearlyFull {
                    client.waitForWritable(true)
                    return
                }
                let sent = chunk.withUnsafeBytes { raw in
                    send(client.fd, raw.baseAddress! + offset, min(raw.count - offset, Self.maxWriteBytes), Int32(MSG_NOSIGNAL))
                }
                if sent >= 0 {
                    client.consume(sent)
                    continue
                }
                switch errno {
                case EINTR:
                    continue
                case EAGAIN, EWOULDBLOCK:
                    client.waitForWritable(true)
                    return
                default:  // EPIPE, ECONNRESET: the client went away mid-write
                    drop(client)
                    return
                }
            }
            client.waitForWritable(false)
            client.stalledSince = nil  // the queue drained: the client reads again
            guard client.droppedPending > 0 else { return }
            let notice: JSONObject = ["type": "dropped", "count": .int(client.droppedPending)]
            client.droppedPending = 0
            client.append(Array((notice.encoded + "\n").utf8))
        }
    }

    /// What one line of a client comes to, decided on the request queue.
    private enum Incoming: Sendable {
        /// A request and its `"id"`, which its reply carries.
        case request(EventRequest, id: JSONValue?)
        case reply(JSONObject)
    }

    /// Request queue: reads what the client sent (up to 64 KiB), splits and parses its lines, and hands the batch to
    /// the server queue; the client is not read again until that batch is answered (back-pressure: a client that
    /// floods requests slows itself only). End of file drops the client, or keeps it receiving after `SHUT_WR`.
    private func readRequests(from client: Client) {
        guard client.isReading else { return }
        var batch: [Incoming] = []
        var ended = false
        reading: for _ in 0..<4 {
            let count = readBuffer.withUnsafeMutableBytes { recv(client.fd, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                split(readBuffer[0..<count], from: client, into: &batch)
                if count < readBuffer.count { break }
                continue
            }
            if count == 0 {
                ended = true
                break
            }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: break reading
            default:
                ended = true
                break reading
            }
        }
        if ended {
            // The client closed its sending side. If it closed the whole connection, drop it; if it only shut down
            // writing, keep delivering events to it.
            var poller = pollfd(fd: client.fd, events: 0, revents: 0)
            let hungUp = poll(&poller, 1, 0) > 0 && poller.revents & Int16(POLLHUP) != 0
            client.cancelReading()
            queue.async { [self, batch] in
                answer(batch[...], from: client) { [self] in
                    if hungUp { drop(client) }
                }
            }
            return
        }
        guard !batch.isEmpty else { return }
        client.suspendReading()
        queue.async { [self, batch] in
            answer(batch[...], from: client) { [self] in
                requestQueue.async { client.resumeReading() }
            }
        }
    }

    /// Request queue: the complete lines in `bytes` (after what the client sent before) as parsed requests.
    private func split(_ bytes: ArraySlice<UInt8>, from client: Client, into batch: inout [Incoming]) {
        let commands = parsedCommands.withLock { $0 }
        let limit = configuration.maxRequestLineBytes
        var rest = bytes
        while !rest.isEmpty {
            let newline = rest.firstIndex(of: UInt8(ascii: "\n"))
            let piece = rest[rest.startIndex..<(newline ?? rest.endIndex)]
            if !client.discardingLine {
                if client.inbound.count + piece.count > limit {
                    client.inbound.removeAll()
                    client.discardingLine = true
                    batch.append(.reply(Self.error("request line longer than \(limit) bytes; ignored")))
                } else {
                    client.inbound.append(contentsOf: piece)
                }
            }
            guard let newline else { return }
            if client.discardingLine {
                client.discardingLine = false
            } else {
                let (parsed, id) = EventRequest.parseLine(client.inbound, commands: commands)
                switch parsed {
                case .empty: break
                case .failure(let message): batch.append(.reply(Self.answering(Self.error(message), id: id)))
                case .request(let request): batch.append(.request(request, id: id))
                }
            }
            client.inbound.removeAll(keepingCapacity: client.inbound.capacity <= 4096)
            rest = rest[(newline + 1)...]
        }
    }

    /// Server queue: answers a batch of one client's requests, in order, then runs `finished`. A command whose
    /// reply is deferred (``CommandHandler``) holds the rest of the batch, not the queue: the rest is answered, and
    /// `finished` run, once that reply has come.
    private func answer(_ batch: ArraySlice<Incoming>, from client: Client, finished: @escaping @Sendable () -> Void) {
        var rest = batch
        while let item = rest.popFirst() {
            guard !client.isClosed else { break }
            switch item {
            case .reply(let object):
                reply(object, to: client)
            case .request(.command(let name, let group, let options), let id):
                let remaining = rest
                let deferred = runCommand(name, group: group, options: options, id: id, from: client) { [self] object in
                    queue.async { [self] in
                        reply(Self.answering(object, id: id), to: client)
                        answer(remaining, from: client, finished: finished)
                    }
                }
                if deferred { return }
            case .request(let request, let id):
                handleRequest(request, id: id, from: client)
            }
        }
        finished()
    }

    /// Server queue: a registered command. Replies now (a refusal, or the handler's reply given before it
    /// returned) and returns false, or returns true and hands the reply to `later` when it comes (on the giving
    /// thread).
    private func runCommand(
        _ name: String, group: String?, options: JSONObject, id: JSONValue?, from client: Client,
        later: @escaping @Sendable (JSONObject) -> Void
    ) -> Bool {
        if configuration.controlCommands.contains(name), !configuration.controlUsers.contains(client.uid) {
            let allowed = configuration.controlUsers.sorted().map(String.init).joined(separator: ", ")
            reply(Self.answering(Self.error("\(name) is refused: uid \(client.uid) \(Self.controlRefusal) (control users: uid \(allowed); add the user to [output] control_users and restart earshotd)"), id: id), to: client)
            return false
        }
        guard let commandHandler else { return false }
        let pending = PendingReply()
        commandHandler(name, group, options) { object in pending.give(object) }
        guard let object = pending.handlerReturned(later: later) else { return true }
        reply(Self.answering(object, id: id), to: client)
        return false
    }

    private static func error(_ message: String) -> JSONObject {
        ["type": "error", "message": .string(message)]
    }

    /// `object` as the reply to a request with `id`: the id right after `type` (first when there is no `type`);
    /// `object` as it is without one.
    package static func answering(_ object: JSONObject, id: JSONValue?) -> JSONObject {
        guard let id else { return object }
        var entries = object.entries.filter { $0.key != "id" }.map { ($0.key, $0.value) }
        entries.insert(("id", id), at: entries.first?.0 == "type" ? 1 : 0)
        return JSONObject(uniqueEntries: entries)
    }

    /// The words of the error reply to a state-changing command from a user not in `controlUsers`
    /// (`sleep_start is refused: uid 1000 may not change the daemon's state (...)`), by which clients tell a
    /// permission refusal from other errors.
    package static let controlRefusal = "may not change the daemon's state"

    package static let requestHint = "send {\"subscribe\":[\"group\",...]} or {\"status\":true}"

    private func handleRequest(_ request: EventRequest, id: JSONValue?, from client: Client) {
        func reply(_ object: JSONObject) { self.reply(Self.answering(object, id: id), to: client) }
        switch request {
        case .subscribe(let names):
            switch policy.decide(names) {
            case .all:
                client.filter = nil
                reply(["type": "subscribed", "groups": "all"])
            case .groups(let groups):
                client.filter = Set(groups)
                reply(["type": "subscribed", "groups": .array(groups.map { .string($0) })])
            case .refused(let message):
                reply(Self.error(message))
            }
        case .listen:
            client.listening = true
            countListeners()
            reply(["type": "listening"])
        case .command:
            // Answered by `answer(_:from:finished:)` (`runCommand`), which holds the batch's later requests while
            // a reply is deferred.
            break
        case .status:
            dropHungUpClients()
            let fields = statusProvider()
            if fields["type"]?.stringValue == "error" {
                reply(fields)
                return
            }
            var object: JSONObject = ["type": "status"]
            for entry in fields.entries where entry.key != "type" { object[entry.key] = entry.value }
            object["subscribers"] = .int(clients.count)
            object["events_published"] = .int(stats.eventsPublished)
            object["dropped_lines"] = .int(stats.droppedLines)
            object["your_dropped_lines"] = .int(client.droppedTotal)
            object["evicted_clients"] = .int(stats.evictedClients)
            object["refused_clients"] = .int(stats.refusedClients)
            object["time"] = .string(EventJSON.timestamp(Date()))
            reply(object)
        }
    }

    /// Servers started by this process, for unique staging names.
    private static let started = Atomic<Int>(0)

    /// The name the socket is bound under before it appears at `path`: `.earshotd-PID-N.sock` in `path`'s
    /// directory (N counts the servers this process started), or nil when that does not fit `sun_path`
    /// (``UnixSocketAddress/maxPathBytes``).
    static func stagingPath(for path: String) -> String? {
        let directory = path.lastIndex(of: "/").map { String(path[...$0]) } ?? ""
        let number = started.add(1, ordering: .relaxed).newValue
        let staging = directory + ".earshotd-\(getpid())-\(number).sock"
        return staging.utf8.count <= UnixSocketAddress.maxPathBytes && staging != path ? staging : nil
    }

    /// Gives the listening socket at `staging` its name `path` with link(2), which never replaces a file (a
    /// socket another process created there since the stale-socket check stays), then removes `staging`; where
    /// the filesystem has no hard links (EPERM, EXDEV, ENOTSUP...), with rename(2). `staging` is gone afterwards
    /// whatever happens.
    /// - Throws: `.cannotCreate` when `path` exists by then, `.system` when neither call succeeds.
    private static func publish(staging: String, at path: String) throws(EarshotError) {
        defer { _ = unlink(staging) }
        if link(staging, path) == 0 { return }
        let code = errno
        if code == EEXIST {
            throw EarshotError(
                .cannotCreate,
                "cannot create socket \(path): \(SocketCall.describe(code)) (another program created it just now; stop it or choose another --socket)",
                cause: SocketCall.describe(code))
        }
        if rename(staging, path) != 0 {
            throw EarshotError.posix(.system, "cannot move socket \(staging) to \(path)", errno: errno)
        }
    }

    /// Raises `EarshotError` for a socket file in the way: removes a stale socket (nobody accepts on it), refuses
    /// a live one or a file that is not a socket.
    private static func removeStaleSocket(at path: String, address: UnixSocketAddress) throws(EarshotError) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }  // nothing there (or unreadable: bind will say)
        if info.st_mode & S_IFMT == S_IFLNK {
            // Named as what it is: a link there may have been planted (trial 13 D8).
            throw EarshotError(
                .cannotCreate, "cannot create socket \(path): a symbolic link is in the way (remove it or choose another --socket)")
        }
        guard info.st_mode & S_IFMT == S_IFSOCK else {
            throw EarshotError(
                .cannotCreate, "cannot create socket \(path): a file that is not a socket is in the way (remove it or choose another --socket)")
        }
        let probe = SocketCall.makeStreamSocket(nonBlocking: true)
        guard probe >= 0 else { throw .posix(.system, "cannot create a Unix socket to probe \(path)", errno: errno) }
        let result = SocketCall.connect(probe, to: address)
        SocketCall.close(probe)
        switch result {
        case 0, EAGAIN, EINPROGRESS:
            // 73 (EX_CANTCREAT), as earshotd --help says for a socket that cannot be created; 69 is the device's.
            throw EarshotError(
                .cannotCreate,
                "cannot listen on \(path): another process is already listening there (is earshotd already running? stop it or choose another --socket)")
        case ECONNREFUSED:
            if unlink(path) != 0, errno != ENOENT {
                throw .posix(.cannotCreate, "cannot remove stale socket \(path)", errno: errno)
            }
        case ENOENT:
            return
        default:
            throw EarshotError(
                .cannotCreate,
                "cannot check the existing socket \(path): \(SocketCall.describe(result)) (remove it or choose another --socket)",
                cause: SocketCall.describe(result))
        }
    }
}

/// One connected client. Touched on the server queue, except the read side (`inbound`, `discardingLine` and the
/// read source), which only the request queue touches.
private final class Client: @unchecked Sendable {
    let id: Int
    let fd: Int32
    /// The peer's uid (`SO_PEERCRED`).
    let uid: UInt32
    private let requestQueue: DispatchQueue
    /// Request queue only.
    private(set) var readSource: DispatchSourceRead?
    private var readSuspended = false
    let writeSource: DispatchSourceWrite
    private(set) var waitingForWritable = false
    private(set) var isClosed = false
    /// Groups this client receives; nil = all.
    var filter: Set<String>?
    /// Whether it asked for a line per window (`{"cmd":"listen"}`).
    var listening = false
    /// Request queue only.
    var inbound: [UInt8] = []
    var discardingLine = false
    var droppedPending = 0
    var droppedTotal = 0
    /// The dropped count sent with the shutdown notice, and how many chunks those notices take at the queue's end.
    var announcedDropped = 0
    var noticeChunks = 0
    /// `SO_SNDBUF`: the most bytes (with the kernel's overhead) the kernel holds for this client.
    private let sendBufferBytes: Int
    /// Monotonic nanoseconds since the client's queue has been full (a line dropped), nil while it keeps up.
    var stalledSince: UInt64?

    private var chunks: [[UInt8]] = []
    private var headIndex = 0
    private var headOffset = 0
    private(set) var queuedBytes = 0

    init(id: Int, fd: Int32, uid: UInt32, queue: DispatchQueue, requestQueue: DispatchQueue) {
        self.id = id
        self.fd = fd
        self.uid = uid
        self.requestQueue = requestQueue
        var size: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        sendBufferBytes = getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, &length) == 0 ? Int(size) : 0
        // The descriptor closes once both sources are cancelled (a source must not outlive its descriptor).
        let closer = DescriptorCloser(fd: fd, users: 2)
        let read = DispatchSource.makeReadSource(fileDescriptor: fd, queue: requestQueue)
        read.setCancelHandler { closer.release() }
        readSource = read
        writeSource = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
        writeSource.setCancelHandler { closer.release() }
        // The write source stays suspended until a write would block.
    }

    var head: ([UInt8], Int)? {
        headIndex < chunks.count ? (chunks[headIndex], headOffset) : nil
    }

    func append(_ line: [UInt8]) {
        chunks.append(line)
        queuedBytes += line.count
    }

    /// Whether the kernel holds so much for this client (`SIOCOUTQ`) that a new line would eat into the room kept
    /// for the shutdown notices (``EventServer/shutdownReserveBytes``, at most half the buffer, so that the kernel's
    /// "writable" at a quarter full comes only after the client has read). False when it cannot be told. The
    /// corresponding C function is `ioctl`.
    var sendBufferNearlyFull: Bool {
        guard sendBufferBytes > 0 else { return false }
        var held: Int32 = 0
        guard ioctl(fd, UInt(TIOCOUTQ), &held) == 0 else { return false }
        return Int(held) + min(EventServer.shutdownReserveBytes, sendBufferBytes / 2) >= sendBufferBytes
    }

    /// Drops the queued lines that have not begun to go out, except the last `kept` chunks (the shutdown notices);
    /// returns how many were dropped.
    func discardBacklog(beforeLast kept: Int) -> Int {
        let first = headIndex + (headOffset > 0 ? 1 : 0)
        let end = chunks.count - kept
        guard end > first else { return 0 }
        for chunk in chunks[first..<end] { queuedBytes -= chunk.count }
        chunks.removeSubrange(first..<end)
        return end - first
    }

    /// Replaces the last ``noticeChunks`` chunks (not begun) with `notices`.
    func replaceNotices(with notices: [[UInt8]]) {
        for chunk in chunks.suffix(noticeChunks) { queuedBytes -= chunk.count }
        chunks.removeLast(noticeChunks)
        for line in notices { append(line) }
        noticeChunks = notices.count
    }

    /// Marks `count` bytes at the head as sent.
    func consume(_ count: Int) {
        queuedBytes -= count
        headOffset += count
        guard headOffset >= chunks[headIndex].count else { return }
        headOffset = 0
        headIndex += 1
        if headIndex == chunks.count {
            chunks.removeAll(keepingCapacity: true)
            headIndex = 0
        } else if headIndex >= 256 {
            chunks.removeFirst(headIndex)
            headIndex = 0
        }
    }

    func waitForWritable(_ wait: Bool) {
        guard wait != waitingForWritable, !isClosed else { return }
        waitingForWritable = wait
        if wait { writeSource.resume() } else { writeSource.suspend() }
    }

    // Request queue.

    /// Whether requests are still read (not after end of file or close).
    var isReading: Bool { readSource != nil }

    func suspendReading() {
        guard let readSource, !readSuspended else { return }
        readSuspended = true
        readSource.suspend()
    }

    func resumeReading() {
        guard let readSource, readSuspended else { return }
        readSuspended = false
        readSource.resume()
    }

    /// Stops watching for requests (end of file, or the client is closed).
    func cancelReading() {
        guard let source = readSource else { return }
        if readSuspended { source.resume() }  // a suspended source must be resumed to be released
        readSuspended = false
        source.cancel()
        readSource = nil
    }

    // Server queue.

    func close() {
        guard !isClosed else { return }
        isClosed = true
        requestQueue.async { [self] in cancelReading() }
        if !waitingForWritable { writeSource.resume() }  // a suspended source must be resumed to be released
        writeSource.cancel()
    }
}

/// The reply to one registered command (``EventServer/CommandHandler``): given by the handler once, from any thread,
/// before it returns or later. A state machine under a lock: the server queue learns whether the reply came while the
/// handler ran (it is sent at once, as before deferred replies existed, ahead of anything the handler published) or
/// is still to come (then `later` runs with it, on the giving thread).
private final class PendingReply: Sendable {
    private enum State {
        /// The handler is running; nothing given yet.
        case running
        /// Given while the handler ran.
        case given(JSONObject)
        /// The handler returned without it: `later` runs when it is given.
        case deferred(later: @Sendable (JSONObject) -> Void)
        /// Sent, or handed to `later`: further ones are ignored.
        case done
    }

    private let state = Mutex(State.running)

    /// The handler's `reply`: the first call counts.
    func give(_ object: JSONObject) {
        let later = state.withLock { state -> (@Sendable (JSONObject) -> Void)? in
            switch state {
            case .running:
                state = .given(object)
                return nil
            case .deferred(let later):
                state = .done
                return later
            case .given, .done:
                return nil
            }
        }
        later?(object)
    }

    /// Server queue, once the handler has returned: the reply if it was given meanwhile (the caller sends it), else
    /// nil, and `later` gets it when it is given.
    func handlerReturned(later: @escaping @Sendable (JSONObject) -> Void) -> JSONObject? {
        state.withLock { state in
            guard case .given(let object) = state else {
                state = .deferred(later: later)
                return nil
            }
            state = .done
            return object
        }
    }
}

/// Closes a descriptor after its last Dispatch source is cancelled (the sources' queues differ: the count is atomic).
private final class DescriptorCloser: Sendable {
    private let fd: Int32
    private let users: Atomic<Int>

    init(fd: Int32, users: Int) {
        self.fd = fd
        self.users = Atomic(users)
    }

    func release() {
        if users.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { SocketCall.close(fd) }
    }
}
