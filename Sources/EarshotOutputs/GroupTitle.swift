/// A group's name as people read it, for Home Assistant entity names and notification titles: `smoke_alarm` ->
/// `Smoke alarm`, `co_alarm` -> `CO alarm` (carbon monoxide: the abbreviation stays in capitals), `baby_cry` ->
/// `Baby cry`.
package enum GroupTitle {
    package static func of(_ group: String) -> String {
        let words = group.split(separator: "_").map { $0 == "co" ? "CO" : String($0) }
        let text = words.joined(separator: " ")
        return text.prefix(1).uppercased() + text.dropFirst()
    }
}
