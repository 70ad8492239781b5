import FoundationEssentials
import EarshotSupport
import EarshotDetection

/// The topics of one node (`P` = `topic_prefix/node`, e.g. `earshot/kitchen`).
package struct MQTTTopics: Sendable, Equatable {
    package let base: String

    package init(base: String) { self.base = base }

    /// `online` / `offline`, retained (also the Last Will).
    package var availability: String { "\(base)/availability" }
    /// Every detection, detection end, alarm, chirp, clip and health event: the socket's JSON plus `node`. QoS 1.
    package var event: String { "\(base)/event" }
    /// Each onset as `{"event_type":GROUP,...}`, for Home Assistant's `event` entity. QoS 1; not sent once it has
    /// waited for the broker more than ``MQTTOutbox/detectedMaximumAgeSeconds`` (5 minutes).
    package var detected: String { "\(base)/detected" }
    /// `{"dbfs":-41.2,"gate_open":true,"time":...}` at most once a second. QoS 0.
    package var level: String { "\(base)/level" }
    /// `ON` while a group's event is open, `OFF` otherwise; retained.
    package func state(_ group: String) -> String { "\(base)/\(group)/state" }
    /// JSON of the group's last event (class, confidence, started; evidence for alarms); retained.
    package func attributes(_ group: String) -> String { "\(base)/\(group)/attributes" }
    /// `ON` when the group is published, `OFF` when muted; retained.
    package func enabled(_ group: String) -> String { "\(base)/\(group)/enabled" }
    /// Commands: `ON` (unmute) or `OFF` (mute) for a group, start or stop for `sleep`, `PRESS` for `test_alert`.
    package func command(_ name: String) -> String { "\(base)/\(name)/set" }
    /// The filter the commands arrive on.
    package var commandFilter: String { "\(base)/+/set" }
    /// The filters of every group's retained topics (state, attributes, enabled), those of groups an earlier run
    /// watched included (and the capture's and the sleep session's, which match them too).
    package var retainedStateFilters: [String] { ["\(base)/+/state", "\(base)/+/attributes", "\(base)/+/enabled"] }
    /// Names under ``retainedStateFilters`` that are not groups (and `notify` with `[notify] url` set).
    package static let fixedStateNames: Set<String> = ["capture", "sleep"]
    /// The `NAME` of a topic `P/NAME/state`, `P/NAME/attributes` or `P/NAME/enabled`, which ``retainedStateFilters``
    /// match: a group, or one of ``fixedStateNames``; nil for any other topic.
    package func stateOwner(_ topic: String) -> String? {
        guard topic.hasPrefix(base + "/") else { return nil }
        let levels = topic.dropFirst(base.count + 1).split(separator: "/", omittingEmptySubsequences: false)
        guard levels.count == 2, ["state", "attributes", "enabled"].contains(levels[1]), !levels[0].isEmpty else {
            return nil
        }
        return String(levels[0])
    }
    /// `ON` while the capture has a problem (device unavailable, input silent); retained.
    package var captureState: String { "\(base)/capture/state" }
    package var captureAttributes: String { "\(base)/capture/attributes" }
    /// `ON` while notifications to a `[notify]` URL are failing (from `notify_failed` until `notify_recovered` for
    /// every URL that failed), with `notify/attributes`; retained. Only with `[notify] url` set.
    package var notifyState: String { "\(base)/notify/state" }
    package var notifyAttributes: String { "\(base)/notify/attributes" }
    /// `ON` while a sleep session runs; retained.
    package var sleepState: String { "\(base)/sleep/state" }
    /// The last sleep session's summary JSON; retained.
    package var sleepReport: String { "\(base)/sleep/report" }
    /// `ON` from a low-battery chirp (an `alarm_chirp` onset) until none for 2 hours
    /// (``MQTTSettings/batteryLowHoldSeconds``), `OFF` after; retained. Kept and deleted with `alarm_chirp`, the
    /// group that publishes it.
    package var batteryLowState: String { state(AlarmEvent.alarmChirp) }
}

/// Home Assistant MQTT discovery for one node: one device (`earshot_NODE`), and per entity a retained config at
/// `DISCOVERY_PREFIX/COMPONENT/earshot_NODE/OBJECT_ID/config`:
///
/// | entity | component | object id | device class, category |
/// |---|---|---|---|
/// | each watched group's sound | `binary_sensor` | GROUP | smoke_alarm: `smoke`, co_alarm: `carbon_monoxide`, glass_break: `safety`, others: `sound` |
/// | each watched group's switch (on = published, off = muted) | `switch` | GROUP`_enabled` | category `config` |
/// | the onsets | `event` | `events` | `event_types`: every group that publishes, and `test_alert` |
/// | the level (unless `[mqtt] level_interval = off`) | `sensor` | `level` | unit `dBFS`, state class `measurement`, no device class (dBFS is not sound pressure), category `diagnostic` |
/// | capture problem | `binary_sensor` | `capture_problem` | `problem`, category `diagnostic` |
/// | notifications failing (with `[notify] url`) | `binary_sensor` | `notifications_failing` | `problem`, category `diagnostic` |
/// | sleep session | `switch` | `sleep_session` | |
/// | a test alert (`PRESS` on `P/test_alert/set`) | `button` | `test_alert` | category `diagnostic` |
/// | a smoke or CO alarm's low battery (while `alarm_chirp` publishes) | `binary_sensor` | `smoke_alarm_battery` | `battery` |
///
/// The device block carries `suggested_area` when ``area`` is set (`[mqtt] area`): Home Assistant puts a device it
/// sees for the first time in that area (creating it when none has that name); it never moves it afterwards.
///
/// `unique_id` is `earshot_NODE_OBJECT_ID`: stable across restarts; `default_entity_id` asks Home Assistant for the
/// entity id `COMPONENT.earshot_NODE_OBJECT_ID` (``defaultEntityID(component:objectID:)``). Every entity follows
/// `P/availability`.
package struct HomeAssistantDiscovery: Sendable {
    package let discoveryPrefix: String
    package let node: String
    package let topics: MQTTTopics
    package let version: String
    /// Whether the `Sound level` sensor exists (`[mqtt] level_interval` not `off`).
    package let level: Bool
    /// The device's `suggested_area` (`[mqtt] area`); nil: none.
    package let area: String?
    /// Whether the `Notifications failing` sensor exists (`[notify] url` set).
    package let notify: Bool

    package init(
        discoveryPrefix: String, node: String, topics: MQTTTopics, version: String = earshotVersion, level: Bool = true,
        area: String? = nil, notify: Bool = false
    ) {
        self.discoveryPrefix = discoveryPrefix
        self.node = node
        self.topics = topics
        self.version = version
        self.level = level
        self.area = area
        self.notify = notify
    }

    /// `earshot_NODE`: the device identifier and the discovery topics' node id.
    package var deviceID: String { "earshot_\(node)" }

    /// The filter that finds this node's configs (also those an earlier run left): `PREFIX/+/earshot_NODE/+/config`.
    package var configFilter: String { "\(discoveryPrefix)/+/\(deviceID)/+/config" }

    /// Home Assistant says `online` here when it (re)starts: configs are published again then.
    package var statusTopic: String { "\(discoveryPrefix)/status" }

    package func configTopic(component: String, objectID: String) -> String {
        "\(discoveryPrefix)/\(component)/\(deviceID)/\(objectID)/config"
    }

    /// The device class of a group's binary sensor.
    package static func deviceClass(group: String) -> String {
        switch group {
        case "smoke_alarm": "smoke"
        case "co_alarm": "carbon_monoxide"
        case "glass_break": "safety"
        default: "sound"
        }
    }

    /// The config messages (topic -> JSON) for `state`, in a stable order.
    package func configs(for state: ControlState) -> [(topic: String, payload: JSONObject)] {
        var result: [(String, JSONObject)] = []
        for group in state.groups {
            result.append((configTopic(component: "binary_sensor", objectID: group), entity(
                component: "binary_sensor", objectID: group, name: GroupTitle.of(group),
                extra: [
                    "device_class": .string(Self.deviceClass(group: group)),
                    "state_topic": .string(topics.state(group)),
                    "json_attributes_topic": .string(topics.attributes(group)),
                    "payload_on": "ON", "payload_off": "OFF",
                ])))
            result.append((configTopic(component: "switch", objectID: "\(group)_enabled"), entity(
                component: "switch", objectID: "\(group)_enabled", name: "\(GroupTitle.of(group)) detection",
                extra: [
                    "command_topic": .string(topics.command(group)),
                    "state_topic": .string(topics.enabled(group)),
                    "payload_on": "ON", "payload_off": "OFF", "state_on": "ON", "state_off": "OFF",
                    "entity_category": "config", "icon": "mdi:ear-hearing",
                ])))
        }
        result.append((configTopic(component: "event", objectID: "events"), entity(
            component: "event", objectID: "events", name: "Sound event",
            extra: [
                "state_topic": .string(topics.detected),
                "event_types": .array((state.eventGroups + [TestAlert.type]).map { .string($0) }),
            ])))
        if level { result.append((configTopic(component: "sensor", objectID: "level"), entity(
            component: "sensor", objectID: "level", name: "Sound level",
            extra: [
                "state_topic": .string(topics.level),
                "value_template": "{{ value_json.dbfs }}",
                "json_attributes_topic": .string(topics.level),
                "unit_of_measurement": "dBFS", "state_class": "measurement",
                "entity_category": "diagnostic", "icon": "mdi:waveform",
            ]))) }
        result.append(problemSensor(
            objectID: "capture_problem", name: "Capture problem", state: topics.captureState, attributes: topics.captureAttributes))
        if notify {
            result.append(problemSensor(
                objectID: "notifications_failing", name: "Notifications failing", state: topics.notifyState,
                attributes: topics.notifyAttributes))
        }
        result.append((configTopic(component: "switch", objectID: "sleep_session"), entity(
            component: "switch", objectID: "sleep_session", name: "Sleep session",
            extra: [
                "command_topic": .string(topics.command("sleep")),
                "state_topic": .string(topics.sleepState),
                "payload_on": "ON", "payload_off": "OFF", "state_on": "ON", "state_off": "OFF",
                "icon": "mdi:sleep",
            ])))
        result.append((configTopic(component: "button", objectID: "test_alert"), entity(
            component: "button", objectID: "test_alert", name: "Test alert",
            extra: [
                "command_topic": .string(topics.command(TestAlert.type)),
                "payload_press": .string(MQTTSink.pressPayload),
                "entity_category": "diagnostic", "icon": "mdi:bell-ring",
            ])))
        if state.eventGroups.contains(AlarmEvent.alarmChirp) {
            // `battery`: on means low. Not diagnostic: it is another device's battery, for the dashboard.
            result.append((configTopic(component: "binary_sensor", objectID: "smoke_alarm_battery"), entity(
                component: "binary_sensor", objectID: "smoke_alarm_battery", name: "Smoke alarm battery",
                extra: [
                    "device_class": "battery",
                    "state_topic": .string(topics.batteryLowState),
                    "payload_on": "ON", "payload_off": "OFF",
                ])))
        }
        return result
    }

    /// The entity id Home Assistant is asked to give an entity of `component` (its domain): `DOMAIN.` and the
    /// unique id as Home Assistant's entity ids spell it (lowercase letters, digits and single `_`, none at either
    /// end: a node's `-` becomes `_`), e.g. `binary_sensor.earshot_kitchen_smoke_alarm`. Sent as
    /// `default_entity_id`, which replaced `object_id` in Home Assistant 2025.10 (`object_id` is ignored from
    /// 2026.4); a value that is no valid entity id would make Home Assistant refuse the whole config.
    package func defaultEntityID(component: String, objectID: String) -> String {
        var slug = ""
        for character in "\(deviceID)_\(objectID)".lowercased() {
            let kept = character.isASCII && (character.isLetter || character.isNumber)
            if kept { slug.append(character) } else if !slug.isEmpty, slug.last != "_" { slug.append("_") }
        }
        while slug.last == "_" { slug.removeLast() }
        return "\(component).\(slug)"
    }

    /// A diagnostic `problem` binary sensor (`ON`/`OFF` on `state`, its attributes as JSON on `attributes`): the
    /// capture's, and the notifications' with `[notify] url`.
    private func problemSensor(objectID: String, name: String, state: String, attributes: String) -> (String, JSONObject) {
        (configTopic(component: "binary_sensor", objectID: objectID), entity(
            component: "binary_sensor", objectID: objectID, name: name,
            extra: [
                "device_class": "problem",
                "state_topic": .string(state),
                "json_attributes_topic": .string(attributes),
                "payload_on": "ON", "payload_off": "OFF", "entity_category": "diagnostic",
            ]))
    }

    private func entity(component: String, objectID: String, name: String, extra: JSONObject) -> JSONObject {
        var object: JSONObject = [
            "name": .string(name),
            "unique_id": .string("\(deviceID)_\(objectID)"),
            "default_entity_id": .string(defaultEntityID(component: component, objectID: objectID)),
            "availability_topic": .string(topics.availability),
            "payload_available": "online", "payload_not_available": "offline",
        ]
        object.merge(extra)
        var device: JSONObject = [
            "identifiers": .array([.string(deviceID)]),
            "name": .string("Earshot \(node)"),
            "manufacturer": "Earshot",
            "model": "earshotd",
            "sw_version": .string(version),
        ]
        if let area { device["suggested_area"] = .string(area) }
        object["device"] = .object(device)
        object["origin"] = .object(["name": "Earshot", "sw_version": .string(version)])
        return object
    }
}
