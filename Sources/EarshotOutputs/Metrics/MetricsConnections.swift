import Dispatch
import Glibc
import Synchronization

/// The metrics server's open connections, kept so that clients which never finish a request cannot keep a scrape
/// out.
///
/// libmicrohttpd closes a connection after a time without traffic and caps their number, nothing more: a client
/// that sends a header byte every few seconds is never idle and holds its place for good, and 16 of them kept every
/// scrape out (audit 13 #1). Two rules on top:
/// - a deadline per request: a connection that has not sent a complete request ``requestDeadline`` after it
///   connected, or after its last response, is closed, idle or not;
/// - room: a connection that arrives while ``maxOpen`` are open closes the oldest one still waiting for its
///   request (the oldest being answered when none waits), so the newest, a scrape, always gets in.
///
/// No cap per address (libmicrohttpd's `MHD_OPTION_PER_IP_CONNECTION_LIMIT`): on the loopback listener every local
/// client has the same address, and such a cap would keep the local Prometheus out with the clients that fill it.
///
/// A connection is closed with shutdown(2) on its descriptor; libmicrohttpd then reads its end on its own thread and
/// closes it there.
///
/// - Important: libmicrohttpd calls ``opened(_:descriptor:)``, ``requestArrived(_:)``, ``requestFinished(_:)`` and
///   ``closed(_:)`` on its thread; the deadlines run on a queue of their own. A descriptor is shut down only under
///   the lock and only while its connection is known here: libmicrohttpd reports a connection closed before it
///   closes the descriptor, so a descriptor shut down is never one that another file has reused.
final class MetricsConnections: Sendable {
    /// Connections kept open at most; one more closes the oldest (see the type's rules). libmicrohttpd's own cap is
    /// twice this, room for those closed and not yet reaped by its thread.
    let maxOpen: Int
    /// How long a connection may take to send a complete request, from its connect or its last response.
    let requestDeadline: DispatchTimeInterval

    private struct Connection {
        var descriptor: Int32
        /// Taken anew each time the connection starts waiting for a request or gets one: the deadline set for an
        /// earlier wait finds another value and does nothing. Lower is older.
        var ticket: UInt64
        /// A request has arrived and its response is not finished.
        var answering = false
        /// Shut down here; libmicrohttpd has not reported it closed yet.
        var closing = false
    }

    private struct State {
        /// By the address of libmicrohttpd's connection, from ``opened(_:descriptor:)`` to ``closed(_:)``.
        var connections: [UInt: Connection] = [:]
        var nextTicket: UInt64 = 0

        mutating func takeTicket() -> UInt64 {
            nextTicket += 1
            return nextTicket
        }

        /// Shuts `key`'s connection down (once). The corresponding C function is `shutdown`.
        mutating func shutDown(_ key: UInt) {
            guard var connection = connections[key], !connection.closing, connection.descriptor >= 0 else { return }
            connection.closing = true
            connections[key] = connection
            _ = Glibc.shutdown(connection.descriptor, Int32(SHUT_RDWR))
        }
    }

    private let state = Mutex(State())
    private let deadlines = DispatchQueue(label: "earshot.metrics.deadlines")

    init(maxOpen: Int, requestDeadline: DispatchTimeInterval) {
        self.maxOpen = maxOpen
        self.requestDeadline = requestDeadline
    }

    /// A connection was accepted (`MHD_CONNECTION_NOTIFY_STARTED`): its request's deadline starts, and when more than
    /// ``maxOpen`` are open the oldest waiting one (else the oldest being answered) is closed.
    func opened(_ key: UInt, descriptor: Int32) {
        let ticket = state.withLock { state -> UInt64 in
            let ticket = state.takeTicket()
            state.connections[key] = Connection(descriptor: descriptor, ticket: ticket)
            let open = state.connections.filter { !$0.value.closing && $0.value.descriptor >= 0 && $0.key != key }
            if open.count >= maxOpen {
                let waiting = open.filter { !$0.value.answering }
                if let oldest = (waiting.isEmpty ? open : waiting).min(by: { $0.value.ticket < $1.value.ticket }) {
                    state.shutDown(oldest.key)
                }
            }
            return ticket
        }
        schedule(key, ticket: ticket)
    }

    /// A complete request arrived (the access handler's call): no deadline while it is answered.
    func requestArrived(_ key: UInt) {
        state.withLock { state in
            guard var connection = state.connections[key], !connection.answering else { return }
            connection.answering = true
            connection.ticket = state.takeTicket()
            state.connections[key] = connection
        }
    }

    /// A request's response is finished (`MHD_OPTION_NOTIFY_COMPLETED`): the next request's deadline starts.
    func requestFinished(_ key: UInt) {
        let ticket = state.withLock { state -> UInt64? in
            guard var connection = state.connections[key] else { return nil }
            connection.answering = false
            connection.ticket = state.takeTicket()
            state.connections[key] = connection
            return connection.ticket
        }
        if let ticket { schedule(key, ticket: ticket) }
    }

    /// libmicrohttpd is about to close the connection's descriptor (`MHD_CONNECTION_NOTIFY_CLOSED`).
    func closed(_ key: UInt) {
        _ = state.withLock { $0.connections.removeValue(forKey: key) }
    }

    private func schedule(_ key: UInt, ticket: UInt64) {
        deadlines.asyncAfter(deadline: .now() + requestDeadline) { [self] in
            state.withLock { state in
                guard let connection = state.connections[key], connection.ticket == ticket, !connection.answering,
                      !connection.closing else { return }
                state.shutDown(key)
            }
        }
    }
}
