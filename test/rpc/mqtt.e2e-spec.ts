import { MqttRecordBuilder, Transport } from '@nestjs/microservices';
import { describeIfBroker, MQTT } from '../support/brokers';
import { describeTransportScenarios } from '../support/transport-scenarios';

describeIfBroker(MQTT)('MQTT message handlers against the real broker', () => {
  describeTransportScenarios({
    name: 'mqtt',
    server: () => ({ transport: Transport.MQTT, options: { url: MQTT.url, protocolVersion: 5 } }),
    client: () => ({ transport: Transport.MQTT, options: { url: MQTT.url, protocolVersion: 5 } }),
    metadataKey: {
      // An MQTT 5 user property.
      expression: 'message.userProperties["idempotency-key"]',
      send: (data, key) =>
        new MqttRecordBuilder(data)
          .setProperties({ userProperties: { 'idempotency-key': key } })
          .build(),
    },
  });
});
