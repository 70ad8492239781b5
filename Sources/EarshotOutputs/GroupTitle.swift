/// A group's name as people read it, for Home Assistant entity names and notification titles: `smoke_alarm` ->
/// `Smoke alarm`, `co_alarm` -> `CO alarm` (carbon monoxide: the abbreviation stays in capitals), `baby_cry` ->
/// `Baby cry`.
package enum GroupTitle {
    package static func of(_ group: String) -> String {
        let words = group.split(separator: "_").map { $0 == "co" ? "CO" : String($0) }
        let text = words.joined(separator: " ")
        return text.prefix(1).uppercased() + text.dropFirst()
    }

    /// A class label as people read it: a model's `MODEL:LABEL` (`builtin_baby_cry:baby_cry`, `ourbaby:ourbaby`)
    /// is its label in words (`Baby cry`, `Ourbaby`); a classifier's AudioSet display name (`Shatter`, `Smoke
    /// detector, smoke alarm`), which never contains `:`, stays as it is. The JSON `class` field keeps the identifier.
    package static func ofClass(_ label: String) -> String {
        // A model's label cannot contain ':', so the last one separates the model's name.
        guard let colon = label.lastIndex(of: ":") else { return label }
        let name = label[label.index(after: colon)...]
        return name.isEmpty ? label : of(String(name))
    }
}
