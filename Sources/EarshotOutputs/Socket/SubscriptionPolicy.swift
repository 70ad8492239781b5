import EarshotSupport

/// Which groups an event-socket client may subscribe to, and what a subscribe request gets: the protocol's policy,
/// apart from the server's transport.
///
/// With `knownGroups` nil any name is accepted. Otherwise a name outside it is refused with one line: a group that
/// exists but is not watched (`unwatched`) gets how to watch it (`the daemon does not watch group "dog_bark": add it
/// to ...`); another name gets the nearest watched or existing name when it looks like a typo (`unknown group
/// "smok" in subscribe (did you mean smoke_alarm? watched groups: ...)`), the groups subscribable without being
/// watched (``EventServer/UnwatchedGroups/alsoSubscribable``) listed apart: `...; also snoring (sleep sessions))`.
package struct SubscriptionPolicy: Sendable, Equatable {
    package var knownGroups: Set<String>?
    package var unwatched: EventServer.UnwatchedGroups

    package enum Decision: Equatable {
        /// An empty list or `*`: every group.
        case all
        /// These groups, in the order first named, without repeats.
        case groups([String])
        /// The error message to reply with; the client's filter stays as it was.
        case refused(String)
    }

    package init(knownGroups: [String]?, unwatched: EventServer.UnwatchedGroups = EventServer.UnwatchedGroups()) {
        self.knownGroups = knownGroups.map(Set.init)
        self.unwatched = unwatched
    }

    /// The answer to `{"subscribe":names}`.
    package func decide(_ names: [String]) -> Decision {
        if names.isEmpty || names.contains("*") { return .all }
        if let knownGroups, let unknown = names.first(where: { !knownGroups.contains($0) }) {
            return .refused(refusal(unknown, knownGroups: knownGroups))
        }
        var unique: [String] = []
        for name in names where !unique.contains(name) { unique.append(name) }
        return .groups(unique)
    }

    private func refusal(_ name: String, knownGroups: Set<String>) -> String {
        if unwatched.names.contains(name) {
            return "the daemon does not watch group \"\(name)\": add it to \(unwatched.advice)"
        }
        let also = unwatched.alsoSubscribable
        let watched = knownGroups.filter { also[$0] == nil }.sorted()
        let others = knownGroups.sorted().compactMap { group in also[group].map { "\(group) (\($0))" } }
        let guess = NameSuggestion.likelyTypo(of: name, among: knownGroups.sorted() + unwatched.names.sorted())
            .map { "did you mean \($0)? " } ?? ""
        let alsoText = others.isEmpty ? "" : "; also \(others.joined(separator: ", "))"
        return "unknown group \"\(name)\" in subscribe (\(guess)watched groups: \(watched.joined(separator: ", "))\(alsoText))"
    }
}
