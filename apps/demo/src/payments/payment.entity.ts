import { Column, CreateDateColumn, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { demoDialect } from '../config';

// The database is known when this file loads: DATABASE_URL's scheme, PostgreSQL without one.
const POSTGRES = demoDialect() === 'postgres';

/** The demo's real work: one row per payment taken. A duplicate that slipped through would be a second row. */
@Entity({ name: 'demo_payments' })
export class Payment {
  @PrimaryGeneratedColumn('uuid')
  id!: string;

  @Column('integer')
  amount!: number;

  @Column('text')
  currency!: string;

  @Column('text', { nullable: true })
  orderId!: string | null;

  /** `http` or `amqp`: which door the request came through. */
  @Column('text')
  source!: string;

  /** MySQL and MariaDB have no `timestamptz`: a DATETIME(6), as the migration makes it. */
  @CreateDateColumn(POSTGRES ? { type: 'timestamptz' } : { type: 'datetime', precision: 6 })
  createdAt!: Date;
}
